"""The YAML configs of ``torchroute``: ``simulate.yaml``, ``pretrain.yaml`` and the groups."""
