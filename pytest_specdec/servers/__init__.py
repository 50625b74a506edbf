"""Inference servers for benchmark tests, independent of pytest.

`ServerSpec` says what a server is; `build_embedded_argv` / `build_sglang_argv` how to start it;
`ManagedServer` starts, watches and stops one process; `ServerPool` reuses them across a session; `GpuLeases` shares GPUs between
xdist workers; `ServerError` is the one failure type, with reason, cause, log path and tail.
"""

from pytest_specdec.servers.attach import AttachedServer, AttachMismatch, ServerIdentity, identify
from pytest_specdec.servers.embedded import build_embedded_argv
from pytest_specdec.servers.diagnosis import FATAL_SIGNATURES, ServerError
from pytest_specdec.servers.leases import GpuLeaseError, GpuLeases, Lease, NotEnoughGpus, read_topology
from pytest_specdec.servers.pool import ServerPool
from pytest_specdec.servers.process import ManagedServer
from pytest_specdec.servers.sglang import METHOD_FLAG_PRESETS, build_sglang_argv, method_flags_from_config
from pytest_specdec.servers.spec import ServerSpec

__all__ = [
    "AttachMismatch",
    "AttachedServer",
    "FATAL_SIGNATURES",
    "GpuLeaseError",
    "GpuLeases",
    "Lease",
    "METHOD_FLAG_PRESETS",
    "ManagedServer",
    "NotEnoughGpus",
    "ServerError",
    "ServerIdentity",
    "ServerPool",
    "ServerSpec",
    "build_embedded_argv",
    "build_sglang_argv",
    "identify",
    "method_flags_from_config",
    "read_topology",
]
