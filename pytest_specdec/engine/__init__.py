"""The embedded reference engine: a real speculative-decoding server, run as its own process.

``python -m pytest_specdec.engine --method {ar,dflash,ddtree} --budget N [...]`` serves SGLang's
HTTP API over a small Llama-style model (``model.py``), decoding autoregressively, with a DFlash
chain or with a DDTree through ``specdec_kernels`` (``decoding.py``), drafts from a synthetic
block drafter (``drafter.py``), batches concurrent requests on one scheduler thread
(``scheduler.py``), logs like SGLang (``logs.py``) and fails on purpose when asked
(``faults.py``). Importing this package imports neither torch nor aiohttp.
"""
