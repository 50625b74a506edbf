"""Inference servers for benchmark tests, independent of pytest.

`ServerSpec` says what a server is; `build_embedded_argv` / `build_sglang_argv` how to start it;
`ManagedServer` starts, watches and stops one process; `ServerPool` reuses them across a session; `GpuLeases` shares GPUs between
xdist workers, `HostClaims` between runs on one host; `ServerError` is the one failure type, with reason, cause, log path and tail.
"""

import importlib

#: Each public name and the module it lives in. Imported on first use (PEP 562): the plugin
#: imports `servers.spec` at load time, and the package must not pull the process manager,
#: the lease book and their HTTP clients in with it.
_HOMES = {
    "AttachMismatch": "attach", "AttachedServer": "attach", "ServerIdentity": "attach",
    "identify": "attach", "build_embedded_argv": "embedded", "FATAL_SIGNATURES": "diagnosis",
    "ServerError": "diagnosis", "HostClaims": "host_claims", "GpuLeaseError": "leases", "GpuLeases": "leases", "Lease": "leases",
    "NotEnoughGpus": "leases", "read_topology": "leases", "ServerPool": "pool",
    "ManagedServer": "process", "METHOD_FLAG_PRESETS": "sglang", "build_sglang_argv": "sglang",
    "method_flags_from_config": "sglang", "ServerSpec": "spec",
}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


__all__ = [
    "AttachMismatch",
    "AttachedServer",
    "FATAL_SIGNATURES",
    "GpuLeaseError",
    "GpuLeases",
    "HostClaims",
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
