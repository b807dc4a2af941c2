"""The YAML configs of ``torchroute``: ``simulate.yaml``, ``pretrain.yaml`` and the groups.

Importing the package makes the presets' ``${data_root:...}`` paths resolvable
(:mod:`torchroute.data_root`), for whatever reads a config file from here.
"""

from torchroute.data_root import register_resolver

register_resolver()
