"""The embedded reference engine: a real speculative-decoding server, run as its own process.

``python -m pytest_specdec.engine --method {ar,dflash,ddtree} --budget N [...]`` serves SGLang's
HTTP API over a small Llama-style model (``model.py``; or a Qwen3.5-style hybrid with Gated
DeltaNet layers, ``linear_attention.py``), decoding autoregressively, with a DFlash
chain or with a DDTree through ``specdec_kernels`` (``decoding.py``), drafts from a synthetic
block drafter (``drafter.py``), batches concurrent requests on one scheduler thread
(``scheduler.py``) behind an aiohttp server (``server.py``), exports Prometheus metrics under
SGLang's names (``metrics.py``), logs like SGLang (``logs.py``) and fails on purpose when asked
(``faults.py``). ``cli.py`` owns the command line, ``runtime.py`` assembles the pieces, and
``python -m pytest_specdec.engine.bench`` measures readiness and tokens/s over HTTP.
Importing this package, ``cli`` or ``bench`` imports neither torch nor aiohttp.
"""
