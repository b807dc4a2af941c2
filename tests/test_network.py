"""No network unless asked: the default job with wandb offline makes no outside connection.

The end-to-end tests run a command in a network namespace with no network (``unshare -n``)
under ``strace -f -e trace=connect`` and fail on any ``connect()`` to an address family other
than AF_UNIX / AF_NETLINK, or to an inet address that is not loopback. They skip (saying why)
where ``unshare`` or ``strace`` is missing or not permitted. WANDB_* variables are removed from
the child's environment (conftest sets WANDB_MODE=offline) so that it sees what a user does:
the default logger and no wandb environment.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchroute.tracking import configure_wandb, wandb_settings

ALLOWED_FAMILIES = {"AF_UNIX", "AF_LOCAL", "AF_NETLINK"}
_CONNECT = re.compile(r"connect\(\d+, \{sa_family=(?P<family>\w+)(?P<rest>[^}]*)\}")
_INET_ADDR = re.compile(r'inet_addr\("(?P<ip>[^"]+)"\)|inet_pton\(AF_INET6, "(?P<ip6>[^"]+)"')


def _offline_command_prefix(trace: Path) -> list[str]:
    """``unshare -n strace ...`` or a skip saying what is missing or not permitted."""
    missing = [tool for tool in ("unshare", "strace") if shutil.which(tool) is None]
    if missing:
        pytest.skip(
            f"{' and '.join(missing)} not installed: the no-network test needs util-linux "
            "unshare and strace (apt-get install -y strace)"
        )
    unshare = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-r", "-n"]  # -r: userns
    strace = ["strace", "-f", "-qq", "-e", "trace=connect", "-e", "signal=none"]
    # --seccomp-bpf stops the traced processes at connect() only (the same calls are
    # traced, without a stop at every other system call); older strace lacks it
    for prefix in ([*unshare, *strace, "--seccomp-bpf"], [*unshare, *strace]):
        probe = subprocess.run(
            [*prefix, "-o", os.devnull, "true"], capture_output=True, text=True, timeout=60
        )
        if probe.returncode == 0:
            break
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(
            "`unshare -n strace` is not permitted here (needs a network namespace and "
            f"ptrace): {reason}"
        )
    return [*prefix, "-o", str(trace)]


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def outside_connects(trace: str) -> list[str]:
    """The strace lines whose ``connect()`` could leave the machine."""
    bad = []
    for line in trace.splitlines():
        match = _CONNECT.search(line)
        if match is None:
            continue
        family = match["family"]
        if family in ALLOWED_FAMILIES:
            continue
        if family in ("AF_INET", "AF_INET6"):
            addr = _INET_ADDR.search(match["rest"])
            if addr is not None:
                ip = ipaddress.ip_address(addr["ip"] or addr["ip6"])
                mapped = getattr(ip, "ipv4_mapped", None)
                if ip.is_loopback or (mapped is not None and mapped.is_loopback):
                    continue
        bad.append(line.strip())
    return bad


def _run_offline(tmp_path: Path, command: list[str], timeout: int) -> None:
    trace = tmp_path / "connect.trace"
    done = subprocess.run(
        [*_offline_command_prefix(trace), *command],
        cwd=tmp_path,
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    bad = outside_connects(trace.read_text() if trace.exists() else "")
    assert not bad, "connect() to the outside with wandb offline:\n" + "\n".join(bad[:20])
    assert done.returncode == 0, f"{command[:3]} failed:\n{(done.stdout + done.stderr)[-3000:]}"


def test_outside_connects_parser():
    trace = "\n".join(
        [
            '7  connect(7, {sa_family=AF_UNIX, sun_path="/tmp/wandb-1/socket"}, 41) = 0',
            "7  connect(3, {sa_family=AF_NETLINK, nl_pid=0, nl_groups=00000000}, 12) = 0",
            '7  connect(5, {sa_family=AF_INET, sin_port=htons(9), sin_addr=inet_addr("127.0.0.1")'
            "}, 16) = 0",
            "7  connect(5, {sa_family=AF_INET6, sin6_port=htons(9), "
            'sin6_addr=inet_pton(AF_INET6, "::1")}, 28) = 0',
            '9  connect(6, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.0.0.53")'
            "}, 16) = -1 ENETUNREACH (Network is unreachable)",
            "9  connect(6, {sa_family=AF_INET6, sin6_port=htons(443), "
            'sin6_addr=inet_pton(AF_INET6, "2606:4700::1")}, 28 <unfinished ...>',
        ]
    )
    bad = outside_connects(trace)
    assert len(bad) == 2 and "10.0.0.53" in bad[0] and "2606:4700::1" in bad[1]


def test_wandb_tracker_offline_makes_no_outside_connection(tmp_path: Path):
    script = (
        "import sys\n"
        "from torchroute.tracking import WandbTracker\n"
        "t = WandbTracker(mode='offline', dir=sys.argv[1])\n"
        "t.log({'a': 1.0}, step=1)\n"
        "t.finish()\n"
    )
    _run_offline(tmp_path, [sys.executable, "-c", script, str(tmp_path / "out")], timeout=180)
    assert list((tmp_path / "out" / "wandb").glob("offline-run-*"))


def test_default_simulate_makes_no_outside_connection(tmp_path: Path):
    """The main job (`torchroute simulate experiment=default`, tiny sizes, default logger)."""
    script = Path(sys.executable).with_name("torchroute")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "torchroute.cli"]
    out = tmp_path / "out"
    command = [
        *cli,
        "simulate",
        "experiment=default",
        "data.num_queries=120",
        "rhos=[0]",
        "seeds=[0]",
        "run_learners=[random,linucb]",
        "progress=false",
        f"out_dir={out}",
        f"cache_dir={tmp_path / 'cache'}",
    ]
    _run_offline(tmp_path, command, timeout=600)
    assert (out / "results.csv").is_file()
    assert list((out / "wandb").glob("offline-run-*"))


@pytest.fixture
def clean_wandb_env(monkeypatch):
    """No WANDB_* variables, and configure_wandb's memory of what it wrote cleared."""
    import torchroute.tracking as tracking

    for key in [k for k in os.environ if k.startswith("WANDB_")]:
        monkeypatch.delenv(key)
    for key in ("WANDB_MODE", *tracking._LOCAL_ENV):
        monkeypatch.delenv(key, raising=False)  # restored (removed) after the test
    monkeypatch.setattr(tracking, "_written", {})


def test_configure_wandb_offline_sets_process_environment(clean_wandb_env):
    assert configure_wandb("offline") == "offline"
    assert os.environ["WANDB_MODE"] == "offline"
    assert os.environ["WANDB_ERROR_REPORTING"] == "false"
    assert os.environ["WANDB__DISABLE_STATS"] == "true"
    assert os.environ["WANDB__DISABLE_MACHINE_INFO"] == "true"
    settings = wandb_settings("offline")
    assert settings["x_disable_stats"] is True and settings["x_disable_machine_info"] is True
    import wandb

    wandb.Settings(mode="offline", **settings)  # every key is a field of the installed wandb
    assert wandb_settings("online") == {}


def test_configure_wandb_honours_environment_and_switches_back(clean_wandb_env, monkeypatch):
    assert configure_wandb("offline") == "offline"
    assert configure_wandb("online") == "online"  # its own WANDB_MODE does not pin the mode
    assert os.environ["WANDB_MODE"] == "online"
    assert "WANDB_ERROR_REPORTING" not in os.environ and "WANDB__DISABLE_STATS" not in os.environ
    monkeypatch.setenv("WANDB_MODE", "disabled")  # the user's choice wins
    assert configure_wandb("online") == "disabled"
    assert os.environ["WANDB_ERROR_REPORTING"] == "false"


def test_configure_wandb_rejects_unknown_modes(clean_wandb_env, monkeypatch):
    with pytest.raises(ValueError, match=r"configure_wandb: mode must be one of .*'offlne'"):
        configure_wandb("offlne")
    monkeypatch.setenv("WANDB_MODE", "ofline")
    with pytest.raises(ValueError, match=r"environment variable WANDB_MODE must be one of"):
        configure_wandb("offline")
