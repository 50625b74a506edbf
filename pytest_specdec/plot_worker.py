"""A worker process of `plot_pool`: draws the pages it is sent, one at a time.

Reads from stdin, as pickles: (rows, matplotlib settings, output folder) once, then a `plots.Page`
at a time until None. Writes to stdout, as a pickle, for each page the paths it wrote, or the
error's text where it could not (the parent then draws that page itself). The stream it writes
to is the one stdout was before `plot_pool.BOOT` moved stdout onto stderr, ahead of any import.
"""

from __future__ import annotations

import pickle
import sys
import traceback
import warnings
from pathlib import Path
from typing import BinaryIO


def serve(sink: BinaryIO) -> None:
    """Answers on `sink`, the worker's stdout set aside before its imports (a library's print goes to stderr)."""
    import matplotlib

    from .plots import save_page

    source = sys.stdin.buffer
    rows, settings, out_dir = pickle.load(source)
    with warnings.catch_warnings():  # a deprecated setting warns as it is set again
        warnings.simplefilter("ignore")
        matplotlib.rcParams.update(settings)
    while True:
        page = pickle.load(source)
        if page is None:
            return
        try:
            answer: object = [str(p) for p in save_page(rows, page, Path(out_dir))]
        except Exception:  # noqa: BLE001  # the parent draws it and meets the error itself
            answer = traceback.format_exc()
        pickle.dump(answer, sink)
        sink.flush()
