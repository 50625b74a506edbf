"""Model provisioning with local directories and an injected fetcher (no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.models import (
    MANIFEST,
    cache_dir_for,
    check_complete,
    is_hub_id,
    provision_model,
)

REPO = {"config.json": b'{"a": 1}', "model-00001.safetensors": b"x" * 1000, "tokenizer.json": b"{}"}


class FakeHub:
    """Records calls; `download` writes the requested files, optionally truncating one."""

    def __init__(self, files=REPO, truncate: str | None = None, fail: Exception | None = None):
        self.files = dict(files)
        self.truncate = truncate
        self.fail = fail
        self.listed = 0
        self.downloads: list[list[str]] = []

    def list_files(self, repo_id, revision):
        self.listed += 1
        if self.fail:
            raise self.fail
        return {name: len(data) for name, data in self.files.items()}

    def download(self, repo_id, revision, local_dir: Path, files):
        self.downloads.append(sorted(files))
        for name in files:
            data = self.files[name]
            if name == self.truncate:
                data = data[: len(data) // 2]
                self.truncate = None  # only the first time
            (local_dir / name).write_bytes(data)


def test_local_path_is_used_as_is(tmp_path):
    model = tmp_path / "my-model"
    model.mkdir()
    hub = FakeHub()
    assert provision_model(str(model), cache_dir=tmp_path / "cache", fetcher=hub) == model
    assert hub.listed == 0


def test_hub_id_is_downloaded_once_then_served_from_cache(tmp_path):
    hub = FakeHub()
    path = provision_model("z-lab/Qwen3-8B-DFlash", cache_dir=tmp_path, fetcher=hub, offline_mode=False)
    assert path == tmp_path / "z-lab--Qwen3-8B-DFlash"
    assert (path / "model-00001.safetensors").stat().st_size == 1000
    assert json.loads((path / MANIFEST).read_text())["files"]["config.json"] == len(REPO["config.json"])
    assert hub.downloads == [sorted(REPO)]
    # Second session: complete, no Hub call at all (works offline too).
    assert provision_model("z-lab/Qwen3-8B-DFlash", cache_dir=tmp_path, fetcher=hub, offline_mode=True) == path
    assert hub.listed == 1 and len(hub.downloads) == 1


def test_incomplete_cache_is_redownloaded_only_where_needed(tmp_path):
    hub = FakeHub()
    path = provision_model("org/m", cache_dir=tmp_path, fetcher=hub, offline_mode=False)
    (path / "tokenizer.json").unlink()  # an interrupted copy / wiped file
    with open(path / "model-00001.safetensors", "r+b") as f:
        f.truncate(10)
    state = check_complete(path)
    assert state.missing == ("tokenizer.json",) and state.wrong_size == ("model-00001.safetensors",)
    assert provision_model("org/m", cache_dir=tmp_path, fetcher=hub, offline_mode=False) == path
    assert hub.downloads[-1] == ["model-00001.safetensors", "tokenizer.json"]
    assert check_complete(path).complete


@pytest.mark.parametrize("damaged", [b"", b'{"files": {"config.json": 8', b"[1]", b'{"files": [1]}',
                                     b'{"files": {"config.json": "8"}}', b'{"files": {"config.json": -1}}',
                                     b"\xff\xfe\x00\x80"])
def test_a_damaged_manifest_is_listed_and_written_again(tmp_path, damaged):
    """Only a missing or undecodable manifest was taken for none: a list, a 'files' of another
    shape or text of another encoding was a traceback (AttributeError, TypeError,
    UnicodeDecodeError) at the start of every run."""
    hub = FakeHub()
    path = provision_model("org/m", cache_dir=tmp_path, fetcher=hub, offline_mode=False)
    (path / MANIFEST).write_bytes(damaged)
    assert check_complete(path) is None
    assert provision_model("org/m", cache_dir=tmp_path, fetcher=hub, offline_mode=False) == path
    assert hub.listed == 2 and check_complete(path).complete


def test_a_manifest_that_cannot_be_opened_is_a_usage_error_naming_it(tmp_path):
    path = cache_dir_for("org/m", tmp_path)
    (path / MANIFEST).mkdir(parents=True)
    with pytest.raises(SpecdecUsageError, match=rf"^model manifest {path / MANIFEST} cannot be read \(Is a "
                                                r"directory\); remove it \(the next run lists"):
        provision_model("org/m", cache_dir=tmp_path, fetcher=FakeHub(), offline_mode=False)


def test_a_download_that_stays_incomplete_is_an_error(tmp_path):
    class Short(FakeHub):
        def download(self, repo_id, revision, local_dir, files):
            (local_dir / "config.json").write_bytes(REPO["config.json"])

    with pytest.raises(SpecdecUsageError, match=r"still incomplete .*model-00001.safetensors \(missing\)"):
        provision_model("org/m", cache_dir=tmp_path, fetcher=Short(), offline_mode=False)


def test_truncated_download_is_caught_and_retried_next_time(tmp_path):
    hub = FakeHub(truncate="model-00001.safetensors")
    with pytest.raises(SpecdecUsageError, match=r"model-00001.safetensors \(wrong size\)"):
        provision_model("org/m", cache_dir=tmp_path, fetcher=hub, offline_mode=False)
    path = provision_model("org/m", cache_dir=tmp_path, fetcher=hub, offline_mode=False)
    assert (path / "model-00001.safetensors").stat().st_size == 1000


def test_offline_names_the_missing_files(tmp_path):
    hub = FakeHub()
    with pytest.raises(SpecdecUsageError, match=r"model org/m is not in the cache .*HF_HUB_OFFLINE is set"):
        provision_model("org/m", cache_dir=tmp_path, fetcher=hub, offline_mode=True)
    path = provision_model("org/m", cache_dir=tmp_path, fetcher=hub, offline_mode=False)
    (path / "tokenizer.json").unlink()
    with pytest.raises(SpecdecUsageError, match=r"incomplete in .*: tokenizer.json \(missing\), and HF_HUB_OFFLINE"):
        provision_model("org/m", cache_dir=tmp_path, fetcher=hub, offline_mode=True)
    assert hub.listed == 1  # offline never reaches the Hub


def test_offline_names_a_fix_that_works(tmp_path):
    """Offline, a model not in the cache said "copy the model there (or point model_cache at a
    copy)", but the cache takes only what the plugin downloaded, with its manifest: a model copied
    there as told failed the same way, run after run. Now it names the setting that takes a copy,
    and says why copied files were not used."""
    copied = tmp_path / "org--m"
    copied.mkdir()
    (copied / "config.json").write_text("{}")
    with pytest.raises(SpecdecUsageError) as info:
        provision_model("org/m", cache_dir=tmp_path, fetcher=FakeHub(), offline_mode=True)
    assert str(info.value) == (
        f"model org/m is not in the cache {copied} (files copied there are not used: the cache holds what "
        f"the plugin downloaded, with its manifest {MANIFEST}), and HF_HUB_OFFLINE is set so it cannot be "
        f"downloaded; unset HF_HUB_OFFLINE, or set model / draft_model in [tool.specdec] to the folder of a "
        f"local copy")


def test_offline_mode_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SpecdecUsageError, match="HF_HUB_OFFLINE"):
        provision_model("org/m", cache_dir=tmp_path, fetcher=FakeHub())
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert provision_model("org/m", cache_dir=tmp_path, fetcher=FakeHub()).is_dir()


def test_hub_failure_is_a_usage_error_with_the_fix(tmp_path):
    hub = FakeHub(fail=RuntimeError("401 Unauthorized"))
    with pytest.raises(SpecdecUsageError, match=r"cannot list the files of model org/gated .*401 .*HF_TOKEN"):
        provision_model("org/gated", cache_dir=tmp_path, fetcher=hub, offline_mode=False)


def test_an_unusable_model_cache_names_model_cache_and_the_fix(tmp_path):
    (tmp_path / "a-file").write_text("")
    cache = tmp_path / "a-file" / "models"  # mkdir fails here even for root, unlike a read-only dir
    with pytest.raises(SpecdecUsageError, match=r"^model cache .*a-file/models cannot be created "
                                                r"\(Not a directory\); set model_cache in "
                                                r"\[tool.specdec\] to a writable directory$"):
        provision_model("org/m", cache_dir=cache, fetcher=FakeHub(), offline_mode=False)


def test_neither_path_nor_hub_id(tmp_path):
    with pytest.raises(SpecdecUsageError, match="model directory .*missing/dir does not exist"):
        provision_model(str(tmp_path / "missing" / "dir"), cache_dir=tmp_path, fetcher=FakeHub())
    with pytest.raises(SpecdecUsageError, match="neither an existing path nor a Hub id"):
        provision_model("qwen3", cache_dir=tmp_path, fetcher=FakeHub())
    assert is_hub_id("Qwen/Qwen3.6-27B") and not is_hub_id("a/b/c") and not is_hub_id("./x")


@pytest.mark.parametrize("ref, problem", [
    ("Qwen/Qwen 3", "it holds ' ' at character 10"),
    ("org/na$me", "it holds '$' at character 7"),
    (" Qwen/Qwen3", "it holds ' ' at character 1"),
    ("org/a--b", "Cannot have -- or .. in repo_id"),  # huggingface_hub's own rule, as it words it
])
@pytest.mark.parametrize("offline", [True, False])
def test_a_malformed_hub_id_is_named_as_one_not_as_missing_from_the_cache(tmp_path, ref, problem, offline):
    """With HF_HUB_OFFLINE set, 'Qwen/Qwen 3' was "not in the cache ...; unset HF_HUB_OFFLINE":
    the wrong fix, since no repository can have that name; online it cost a listing to fail."""
    from pytest_specdec.models import check_on_hub

    hub = FakeHub()
    expected = (f"model {ref!r} is not a valid Hub id: {problem}; fix model / draft_model in [tool.specdec] "
                f"(a Hub id is org/name in letters, digits, '-', '_' and '.')")
    with pytest.raises(SpecdecUsageError) as info:
        provision_model(ref, cache_dir=tmp_path, fetcher=hub, offline_mode=offline)
    assert str(info.value) == expected
    with pytest.raises(SpecdecUsageError) as info:
        check_on_hub(ref, cache_dir=tmp_path, fetcher=hub)
    assert str(info.value) == expected and hub.listed == 0


def test_revision_gets_its_own_cache_dir(tmp_path):
    assert cache_dir_for("org/m", tmp_path, "v2") == tmp_path / "org--m@v2"


def test_a_missing_local_model_directory_is_named_before_any_boot(pytester, monkeypatch):
    """A model path that is not there is a missing directory, not a malformed setting."""
    from pytest_specdec import backends

    monkeypatch.setattr(backends, "sglang_importable", lambda python=None: True)
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "sglang"\n'
                               'model = "/nonexistent/models/Qwen3-8B"\n')
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-specdec: model directory /nonexistent/models/"
                                 "Qwen3-8B does not exist; copy the model there*"])
    with pytest.raises(SpecdecUsageError, match="model directory ./weights/m does not exist"):
        provision_model("./weights/m", cache_dir=pytester.path / "cache")
