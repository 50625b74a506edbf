"""A worker process of `plot_pool`: draws the pages it is sent, one at a time.

Reads from stdin, as pickles: (rows, matplotlib settings, output folder) once, then a `plots.Page`
at a time until None. Writes to stdout, as a pickle, for each page the paths it wrote, or the
error's text where it could not (the parent then draws that page itself).
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
import warnings
from pathlib import Path


def serve() -> None:
    import matplotlib

    from .plots import save_page

    source = sys.stdin.buffer
    sink = os.fdopen(os.dup(1), "wb")  # the answers' own stream: a library's print goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
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
