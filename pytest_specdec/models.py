"""Model provisioning: a local path as is, or a Hub id fetched into a cache and checked complete.

The cache is typically /dev/shm (fast to load, wiped by a reboot), so "is the model there?" is
asked every session, and a half-finished download from an interrupted run is the common case.
Completeness is judged against the repository's own file listing (names and sizes), saved in a
manifest when it is downloaded: a missing or truncated file means re-download, and in offline mode
(`HF_HUB_OFFLINE`) an error that names the missing files. huggingface_hub is imported only when a
download is needed; tests inject a `ModelFetcher` and never touch the network.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from filelock import FileLock

from pytest_specdec import json_text
from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.file_kind import refuse_special
from pytest_specdec.whole_file import replace_text

MANIFEST = ".specdec-manifest.json"


class ModelFetcher(Protocol):
    """The two Hub operations provisioning needs (injected in tests)."""

    def list_files(self, repo_id: str, revision: str | None) -> Mapping[str, int]:
        """Repository file path -> size in bytes."""

    def download(self, repo_id: str, revision: str | None, local_dir: Path, files: list[str]) -> None:
        """Put `files` of the repository under `local_dir`, keeping their relative paths."""


class HubFetcher:
    """`ModelFetcher` over huggingface_hub (imported lazily; the `models` extra)."""

    def list_files(self, repo_id: str, revision: str | None) -> Mapping[str, int]:
        from huggingface_hub import HfApi

        info = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
        return {s.rfilename: int(s.size or 0) for s in info.siblings or ()}

    def download(self, repo_id: str, revision: str | None, local_dir: Path, files: list[str]) -> None:
        from huggingface_hub import snapshot_download

        snapshot_download(repo_id, revision=revision, local_dir=str(local_dir), allow_patterns=files)


@dataclass(frozen=True)
class Completeness:
    """Files of the manifest that are absent, or present at the wrong size."""

    missing: tuple[str, ...]
    wrong_size: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not self.missing and not self.wrong_size

    def describe(self, limit: int = 10) -> str:
        items = [f"{name} (missing)" for name in self.missing] + [
            f"{name} (wrong size)" for name in self.wrong_size
        ]
        more = f" and {len(items) - limit} more" if len(items) > limit else ""
        return ", ".join(items[:limit]) + more


def offline() -> bool:
    """huggingface_hub's own switch, read the same way it reads it."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def is_hub_id(ref: str) -> bool:
    """`org/name` that is not an existing path (a local path always wins)."""
    return (
        not Path(ref).expanduser().exists()
        and not ref.startswith(("/", ".", "~"))
        and ref.count("/") == 1
        and all(ref.split("/"))
    )


def in_project(ref: str, root: Path) -> str:
    """`ref` as a project file means it: a relative path is the project root's, as every path in
    [tool.specdec] is, not the working directory's; a Hub id (org/name, no such folder in the
    project) stays as it is."""
    path = Path(ref).expanduser()
    if path.is_absolute():
        return str(path)
    local = Path(root) / path
    if local.exists() or ref.startswith((".", "~")) or ref.count("/") > 1 or not all(ref.split("/")):
        return str(local)
    return ref


def check_local(ref: str) -> None:
    """Raise SpecdecUsageError when `ref` is a local path that does not exist, or an org/name that
    no Hub repository can be named (a Hub id passes: it is fetched later). Cheap, so a run checks
    its models before any server boots."""
    if Path(ref).expanduser().exists():
        return
    if is_hub_id(ref):
        problem = hub_id_problem(ref)
        if problem:  # else offline it read as "not in the cache", online as a failed listing
            raise SpecdecUsageError(
                f"model {ref!r} is not a valid Hub id: {problem}; fix model / draft_model in [tool.specdec] "
                f"(a Hub id is org/name in letters, digits, '-', '_' and '.')")
        return
    if ref.startswith(("/", ".", "~")) or ref.count("/") > 1 or "\\" in ref:
        raise SpecdecUsageError(
            f"model directory {ref} does not exist; copy the model there, or fix model / "
            f"draft_model in [tool.specdec] (a Hub id is written org/name)")
    raise SpecdecUsageError(
        f"model {ref!r} is neither an existing path nor a Hub id of the form org/name; "
        f"fix model / draft_model in [tool.specdec]")


#: The characters huggingface_hub's validator allows in a repository id, besides the one '/'
_HUB_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./")


def hub_id_problem(ref: str) -> str | None:
    """Why `ref` is no Hub repository id, by huggingface_hub's own rules (`validate_repo_id`), with
    the first character it may not hold named; None for a valid id, or without huggingface_hub
    (a run that fetches asks for it first)."""
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:
        return None
    try:
        validate_repo_id(ref)
    except HFValidationError as exc:
        at = next((i for i, char in enumerate(ref) if char not in _HUB_ID_CHARS), None)
        if at is not None:
            return f"it holds {ref[at]!r} at character {at + 1}"
        return str(exc).rpartition(": '")[0] or str(exc)  # the rule, without the id repeated
    return None


def cache_dir_for(ref: str, cache_dir: Path, revision: str | None = None) -> Path:
    """Where a Hub id lives in the cache: `<cache>/<org>--<name>[@<revision>]`."""
    name = ref.replace("/", "--") + (f"@{revision}" if revision else "")
    return Path(cache_dir).expanduser() / name


def check_complete(local_dir: Path) -> Completeness | None:
    """Compare a cached model with its manifest; None when there is no manifest yet, or one a
    crash or an edit damaged (the next listing of the model's files writes it anew)."""
    path = local_dir / MANIFEST
    refuse_special(path, "model manifest", "remove it (the next run lists the model's files again)")
    try:
        manifest = json_text.loads(path.read_bytes())
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    except OSError as exc:  # a folder, a link loop, no read permission: it cannot be written anew either
        raise SpecdecUsageError(f"model manifest {path} cannot be read ({exc.strerror or exc}); remove it "
                                f"(the next run lists the model's files again)") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(
            isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in files.values()):
        return None
    missing, wrong = [], []
    for name, size in sorted(files.items()):
        path = local_dir / name
        if not path.is_file():
            missing.append(name)
        elif size and path.stat().st_size != size:  # size 0 = unknown in the listing
            wrong.append(name)
    return Completeness(tuple(missing), tuple(wrong))


def provision_model(
    ref: str,
    *,
    cache_dir: Path | str = "/dev/shm/models",
    revision: str | None = None,
    fetcher: ModelFetcher | None = None,
    offline_mode: bool | None = None,
) -> Path:
    """A local directory holding the complete model `ref` (a path or a Hub id).

    A local path is returned as is (it must exist). A Hub id is looked up in `cache_dir`; when
    absent or incomplete it is downloaded (only the missing and wrong-size files), unless offline,
    which raises SpecdecUsageError naming the missing files. Concurrent callers (xdist workers)
    serialise on a lock file beside the model directory.
    """
    path = Path(ref).expanduser()
    if path.exists():
        return path
    check_local(ref)
    local_dir = cache_dir_for(ref, Path(cache_dir), revision)
    try:
        local_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecdecUsageError(
            f"model cache {local_dir.parent} cannot be created ({e.strerror or e}); "
            f"set model_cache in [tool.specdec] to a writable directory"
        ) from None
    is_offline = offline() if offline_mode is None else offline_mode
    with FileLock(str(local_dir) + ".lock"):
        state = check_complete(local_dir)
        if state is not None and state.complete:
            return local_dir
        if is_offline:
            if state is not None:
                what = f"is incomplete in {local_dir}: {state.describe()}"
            elif local_dir.is_dir() and any(local_dir.iterdir()):  # a copy put there by hand
                what = (f"is not in the cache {local_dir} (files copied there are not used: the cache "
                        f"holds what the plugin downloaded, with its manifest {MANIFEST})")
            else:
                what = f"is not in the cache {local_dir}"
            raise SpecdecUsageError(
                f"model {ref} {what}, and HF_HUB_OFFLINE is set so it cannot be downloaded; "
                f"unset HF_HUB_OFFLINE, or set model / draft_model in [tool.specdec] to the folder of a "
                f"local copy"
            )
        fetcher = fetcher or HubFetcher()
        try:
            files = dict(fetcher.list_files(ref, revision))
        except Exception as e:
            raise SpecdecUsageError(_unlisted(ref, e)) from e
        _write_manifest(local_dir, ref, revision, files)
        state = check_complete(local_dir)
        todo = list(state.missing + state.wrong_size)
        for name in state.wrong_size:  # a truncated file may look finished to the downloader
            (local_dir / name).unlink()
        try:
            fetcher.download(ref, revision, local_dir, todo)
        except Exception as e:
            raise SpecdecUsageError(
                f"downloading model {ref} into {local_dir} failed ({type(e).__name__}: {e}); "
                f"the next run resumes it"
            ) from e
        state = check_complete(local_dir)
        if not state.complete:
            raise SpecdecUsageError(
                f"model {ref} is still incomplete in {local_dir} after downloading: {state.describe()}; "
                f"check free space in {local_dir.parent}"
            )
        return local_dir


def check_on_hub(ref: str, *, cache_dir: Path | str = "/dev/shm/models", revision: str | None = None,
                 fetcher: ModelFetcher | None = None) -> None:
    """SpecdecUsageError where Hub id `ref` is neither complete in the cache nor listed on the Hub:
    one listing, no download, so that a run names every bad id before any server boots."""
    check_local(ref)
    state = check_complete(cache_dir_for(ref, Path(cache_dir), revision))
    if state is not None and state.complete:
        return
    try:
        (fetcher or HubFetcher()).list_files(ref, revision)
    except Exception as e:
        raise SpecdecUsageError(_unlisted(ref, e)) from e


def _unlisted(ref: str, e: Exception) -> str:
    return (f"cannot list the files of model {ref} on the Hub ({type(e).__name__}: {e}); check the id and "
            f"revision, HF_TOKEN for gated repos, or set HF_HUB_OFFLINE with a cached copy")


def _write_manifest(local_dir: Path, ref: str, revision: str | None, files: Mapping[str, int]) -> None:
    local_dir.mkdir(parents=True, exist_ok=True)
    replace_text(local_dir / MANIFEST, json.dumps({"repo_id": ref, "revision": revision, "files": dict(files)},
                                                  indent=1), durable=False)
