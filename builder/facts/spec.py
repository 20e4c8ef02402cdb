"""The plan's vocabulary: frozen specs that every later stage reads.

``BuildSpec`` is the farm's unit of work (one wheel). ``ImageSpec`` is one
toolchain image, shared by every build that can use it. Both are pure data;
``builder.planning.plan`` makes them from matrix.toml, nothing else constructs them from
user input. What a build is made from (this checkout, an sdist's pin, a pinned file) is here too:
a recipe (the plan's) names its pin, builder.sourcing.sources fetches it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import InvalidVersion, Version


def stable_hash(obj: object, length: int = 12) -> str:
    """A short sha256 of a JSON-able object, identical across runs and machines."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def sha256_of(path) -> str:
    """A file's sha256 (the index's store and the variant files it makes are recorded by it)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@dataclass(frozen=True)
class ImageSpec:
    id: str  # e.g. "cuda13.0-x86_64-<hash>": names the toolchain, hash of everything in it
    kind: str  # "cpu" | "cuda" | "rocm"
    base: str  # base image reference (registry image, or a local one the farm makes)
    platform: str  # "linux_x86_64" | "linux_aarch64"
    toolkit: str | None  # "13.0", "12.4", "6.2"; None for cpu
    toolkit_source: str  # "base" (already in the base image) | "pypi" | "debian" | "none"
    pythons: tuple[str, ...]  # "3.11", ... every Python any build of this image needs
    template: str  # docker/<template>.j2
    extra: dict = field(default_factory=dict, compare=False, hash=False)  # template-only settings

    def to_json(self) -> dict:
        d = asdict(self)
        d["pythons"] = list(self.pythons)
        return d


@dataclass(frozen=True)
class BuildSpec:
    # stable: "<variant>-<cpXY>-<platform>" (cu13-torch2.14-cxx11abiTRUE-cp311-linux_x86_64) for the checkout,
    # "<project>-<variant>-<cpXY>-<platform>" for a recipe's build
    id: str
    torch: str  # major.minor ("2.14"), or "stable"
    torch_version: str  # the exact release installed for the build ("2.14.1")
    python: str  # "3.11"
    accelerator: str  # "cpu" | "cu11" | "cu12" | "cu13" | "hip62" ...
    toolkit: str | None  # "12.9", "13.0", "6.2"; None for cpu
    cxx11abi: bool
    platform: str  # "linux_x86_64"
    variant: str  # "cu12-torch2.6-cxx11abiFALSE"
    label: str  # "cu12torch2.6cxx11abiFALSE"
    archs: tuple[str, ...]  # ("sm_80", "sm_90") or ("gfx90a", ...); () for cpu
    image: str  # ImageSpec.id
    torch_index_url: str  # where this torch build is installed from ("" = the default index)
    cxx_std: int  # 17 or 20
    manylinux: str  # repair target, e.g. "manylinux_2_28_x86_64"
    stable: bool = False  # a stable-ABI (abi3) build serving many torch releases
    serves: tuple[str, ...] = ()  # variant keys this wheel serves (stable builds: many)
    inputs_hash: str = ""  # changes when anything that affects the wheel changes
    # False when cxx11abi differs from the ABI the installed torch ships (an NGC-style
    # cxx11abiTRUE build against torch <= 2.6): the wheel is right for NGC's torch,
    # so a smoke test against torch_version from torch_index_url cannot import it.
    abi_native: bool = True
    # What the wheel is made of: this checkout, or a third-party recipe's pinned sdist (builder/sourcing/prepare.py).
    project: str = "mamba-ssm"  # the wheel's distribution name (canonical)
    source: str = "checkout"  # "checkout" or the pin's identity ("sdist:causal-conv1d==1.7.0@sha256:...")
    extensions: tuple[str, ...] = ()  # globs of the extension modules the audits read (wheel paths)
    env: tuple[tuple[str, str], ...] = ()  # the recipe's build environment (set these)...
    unset: tuple[str, ...] = ()  # ...and remove these
    # A recipe's build of its trimmed kernel set (the profile's trim: its patches with when.trim applied):
    # representative of the full build and cheaper to compile, for the CI set; never a release's
    trim: bool = False
    # Planned but not prebuilt: a release builds it only when asked (release.yml's on-request input); the
    # coverage page marks its cells "on request" with that command. Never part of inputs_hash: it changes no byte.
    on_request: bool = False

    @property
    def from_recipe(self) -> bool:
        return self.source != "checkout"

    @property
    def python_tag(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def compiles_through_ccache(self) -> bool:
        """A recipe's CUDA build: nvcc runs through ccache (build.sh), so the compile group's Pythons share
        objects. The checkout has its own kernel cache; torch never wraps hipcc."""
        return self.from_recipe and self.accelerator.startswith("cu")

    @property
    def compile_group(self) -> str:
        """The id without its Python: the builds that compile the same kernels with one toolchain
        (torch build, toolkit, ABI, archs, image), which the image's kernel cache lets compile once."""
        return self.id.replace(f"-{self.python_tag}-", "-", 1)

    def to_json(self) -> dict:
        d = asdict(self)
        d["archs"] = list(self.archs)
        d["serves"] = list(self.serves) or [self.variant]
        d["extensions"] = list(self.extensions)
        d["env"] = dict(self.env)
        d["unset"] = list(self.unset)
        return d


# ---------------------------------------------------------------------------
# What a build is made from.


@dataclass(frozen=True)
class CheckoutSource:
    """This repository's own tree (today's default source)."""

    root: Path

    @property
    def identity(self) -> str:
        """What the index compares to refuse two different sources under one distribution name."""
        return "checkout"

    def describe(self) -> str:
        return f"this checkout ({self.root})"


@dataclass(frozen=True)
class _ProjectPin:
    """What every recipe pin says: the project and version it holds, the name the cache stores it under, and
    its identity and provenance record, both led by ``KIND`` and ended by what pins it (``_pinned``)."""

    KIND: ClassVar[str]
    name: str  # distribution name as the index knows it ("mamba-ssm" or "mamba_ssm")
    version: str

    @property
    def project(self) -> str:
        return canonicalize_name(self.name)

    @property
    def filename(self) -> str:
        """The PEP 625 name of the archive (what the cache stores it as), whatever a URL's last segment says."""
        return f"{self.project.replace('-', '_')}-{self.version}.tar.gz"

    @property
    def identity(self) -> str:
        return f"{self.KIND}:{self.project}=={self.version}@{self._pin}"

    def provenance(self) -> dict:
        """What a wheel's provenance record says of this source (builder/verifying/provenance.py)."""
        return {"kind": self.KIND, "name": self.project, "version": self.version, **self._pinned()}


@dataclass(frozen=True)
class _HashPin(_ProjectPin):
    """A pin whose archive must have ``sha256``."""

    sha256: str

    @property
    def _pin(self) -> str:
        return f"sha256:{self.sha256}"


@dataclass(frozen=True)
class SdistPin(_HashPin):
    """A published sdist: ``name==version`` whose archive must have ``sha256``."""

    KIND = "sdist"

    def _pinned(self) -> dict:
        return {"sha256": self.sha256}

    def describe(self) -> str:
        return f"{self.project} {self.version} (sdist sha256 {self.sha256[:12]}…)"

    def matches_filename(self, filename: str) -> bool:
        try:
            name, version = parse_sdist_filename(filename)
        except (InvalidSdistFilename, InvalidVersion):
            return False
        return filename.endswith(".tar.gz") and name == self.project and version == Version(self.version)


@dataclass(frozen=True)
class FilePin:
    """A file at one URL (a Debian package on the apt mirror: builder/environments/interpreters.py), pinned by its
    name, version and sha256; fetched, cached and checked exactly as an sdist is."""

    name: str
    version: str
    sha256: str
    url: str  # http(s) only: is_web_url is checked before anything is opened

    @property
    def project(self) -> str:
        return self.name

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    def describe(self) -> str:
        return f"{self.name} {self.version} ({self.filename}, sha256 {self.sha256[:12]}…)"


@dataclass(frozen=True)
class ArchivePin(_HashPin):
    """A source archive at one URL (a GitHub tag tarball: ``https://github.com/<o>/<r>/archive/refs/tags/<tag>.tar.gz``),
    pinned by its sha256: for a project whose PyPI sdists lack its sources. NAME and VERSION say what it holds
    (the wheel's version comes from its setup.py); fetched, cached, checked and unpacked as an sdist is."""

    KIND = "archive"
    url: str  # http(s) only: the recipe is refused otherwise

    def _pinned(self) -> dict:
        return {"url": self.url, "sha256": self.sha256}

    def describe(self) -> str:
        return f"{self.project} {self.version} (archive {self.url}, sha256 {self.sha256[:12]}…)"


@dataclass(frozen=True)
class GitPin(_ProjectPin):
    """A git repository at one full commit hash (git checks every object it fetches against its hash, so the
    commit pins the whole tree). NAME and VERSION say what it holds; the tree is ``git archive``'s output,
    unpacked and checked as an sdist is."""

    KIND = "git"
    url: str  # http(s) only, no options: the recipe is refused otherwise
    commit: str  # 40 lowercase hex digits

    @property
    def _pin(self) -> str:
        return self.commit

    def _pinned(self) -> dict:
        return {"url": self.url, "commit": self.commit}

    def describe(self) -> str:
        return f"{self.project} {self.version} (git {self.url} at {self.commit[:12]})"


def canary_version(release: str, distance: int) -> str:
    """The version of a commit DISTANCE commits after the release RELEASE: the development release of the next
    post-release (``2.3.2.post1``, 9 -> ``2.3.2.post2.dev9``; ``1.7.0``, 2 -> ``1.7.0.post1.dev2``). PEP 440 sorts
    it above RELEASE and below every release after it (``RELEASE.devN`` would sort below RELEASE itself), and a
    ``.devN`` is never a release's version."""
    v = Version(release)
    if v.is_devrelease or v.local is not None or distance < 1:
        raise ValueError(f"{release!r} at distance {distance}: a canary follows a release by one commit or more")
    epoch = f"{v.epoch}!" if v.epoch else ""
    pre = "".join(map(str, v.pre)) if v.pre else ""
    return f"{epoch}{'.'.join(map(str, v.release))}{pre}.post{(v.post or 0) + 1}.dev{distance}"


@dataclass(frozen=True)
class CanaryPin(GitPin):
    """A default branch's head at one full commit, DISTANCE commits after the release tag RELEASE: a GitPin whose
    version is :func:`canary_version`'s and whose identity is a line of its own (``canary:``), never a release's."""

    branch: str = "main"
    release: str = ""  # the newest release tag the commit descends from, as a version ("2.3.2.post1")
    distance: int = 0  # commits from that tag to the commit (git describe's count)

    @property
    def identity(self) -> str:
        return f"canary:{self.project}=={self.version}@{self.commit}"

    def describe(self) -> str:
        return (f"{self.project} {self.version} (the {self.branch} branch of {self.url} at {self.commit[:12]}, "
                f"{self.distance} commits after {self.release})")  # fmt: skip

    def provenance(self) -> dict:
        return {**super().provenance(), "kind": "canary", "branch": self.branch, "release": self.release,
                "distance": self.distance}  # fmt: skip


RecipeSource = SdistPin | ArchivePin | GitPin
Source = CheckoutSource | SdistPin | ArchivePin | GitPin
