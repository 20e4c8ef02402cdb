"""Find, download and verify the prebuilt wheel for this environment, in ``builder index``'s layout.

Runs inside ``setup.py`` before the package exists, so it uses the standard library only and takes the
:class:`variant.Variant` from its caller. Every failure ends in an :class:`Outcome` whose ``line`` says
which, and the caller builds from source; nothing here raises on bad network, pages or hashes.
"""

# No `from __future__ import annotations`: setup.py may load this file by path without registering
# it in sys.modules, and dataclasses then cannot resolve string annotations.
import hashlib
import http.client
import importlib.util
import ipaddress
import os
import platform as _platform
import re
import stat
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

# The project's published index (the root holding the variant folders). The one
# place it is set; MAMBA_WHEEL_INDEX overrides it. A release's sdist carries the index that
# the same release deployed (INDEX_STAMP, written by release.yml's sdist job), which wins
# over this default: the published sdist looks where its own wheels are.
DEFAULT_INDEX_URL = "https://mamba-ssm.github.io/wheels"
INDEX_STAMP = "_index_url.txt"
# Where this project's source is, with a `v<version>` tag per release: a source build of this line starts
# there (docs/user/install-source.md clones it), never from PyPI, whose `mamba-ssm` is upstream's sdist.
SOURCE_REPOSITORY = "https://github.com/mamba-ssm/wheels"

ENV_INDEX = "MAMBA_WHEEL_INDEX"
ENV_FORCE_BUILD = "MAMBA_FORCE_BUILD"
ENV_ALLOW_HTTP = "MAMBA_ALLOW_HTTP"
TIMEOUT_S = 15.0  # per request, overall (mamba_ssm.guard.Deadline), not only per socket read
PAGE_CAP = 16 << 20  # an index page listing every wheel of a release is well under 1 MiB
WHEEL_CAP = 4 << 30
DOWNLOAD_DEADLINE_S = 1800.0
PREFIX = "mamba-ssm:"

_WHEEL_RE = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)
_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "TRUE", "YES", "ON"}


def default_index_url() -> str:
    """The stamped index (INDEX_STAMP beside this file, one URL), else DEFAULT_INDEX_URL."""
    try:
        url = Path(__file__).with_name(INDEX_STAMP).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return DEFAULT_INDEX_URL
    return url if _guard.is_web_url(url) else DEFAULT_INDEX_URL


def _sibling(name: str):
    """A module of this package: imported, or (setup.py has no package to import from) loaded from the file
    next to this one."""
    if __package__:
        return importlib.import_module(f"{__package__}.{name}")
    spec_name = f"_mamba_ssm{name}"
    if spec_name in sys.modules:
        return sys.modules[spec_name]
    spec = importlib.util.spec_from_file_location(spec_name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


def load_variant_module():
    """``variant`` from the file next to this one (setup.py has no package to import from)."""
    return _sibling("variant")


_guard = _sibling("guard")


# ---------------------------------------------------------------- wheel names and tags


@dataclass(frozen=True)
class WheelName:
    filename: str
    name: str
    public: str  # "0.3.0"
    local: str | None  # "cputorch2.13cxx11abiTRUE"
    pythons: tuple[str, ...]
    abis: tuple[str, ...]
    platforms: tuple[str, ...]


def parse_wheel_name(filename: str) -> WheelName | None:
    m = _WHEEL_RE.match(filename)
    if not m:
        return None
    public, _, local = m.group("version").partition("+")
    return WheelName(
        filename=filename,
        name=re.sub(r"[-_.]+", "_", m.group("name")).lower(),
        public=public,
        local=local or None,
        pythons=tuple(m.group("py").split(".")),
        abis=tuple(m.group("abi").split(".")),
        platforms=tuple(m.group("plat").split(".")),
    )


def glibc_version() -> tuple[int, int] | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"
    except (AttributeError, ValueError, OSError):
        return None
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def platform_ok(tag: str, machine: str | None = None, glibc: tuple[int, int] | None = None) -> bool:
    """Whether a wheel platform tag runs here (``linux_x86_64``, ``manylinux_2_28_x86_64``, legacy aliases)."""
    machine = machine or _platform.machine()
    glibc = glibc if glibc is not None else glibc_version()
    if tag == f"linux_{machine}":
        return True
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(.+)", tag)
    if m:
        need, arch = (int(m.group(1)), int(m.group(2))), m.group(3)
    else:
        legacy, _, arch = tag.partition("_")
        if legacy not in _LEGACY_MANYLINUX:
            return False
        need = _LEGACY_MANYLINUX[legacy]
    return arch == machine and glibc is not None and glibc >= need


def python_ok(wheel: WheelName, py: str) -> tuple[bool, bool]:
    """(runs here, through the stable ABI). ``py`` is ``cp311``; ``cp310-abi3`` serves every CPython 3 >= 3.10."""
    for tag in wheel.pythons:
        if not (tag.startswith("cp") and tag[2:].isdigit()):
            continue
        if tag == py and py in wheel.abis:
            return True, False
        # a free-threaded interpreter (cp314t) loads no abi3 wheel
        if "abi3" in wheel.abis and py[2:].isdigit() and tag[2] == py[2] and int(tag[3:]) <= int(py[3:]):
            return True, True
    return False, False


# ---------------------------------------------------------------- index pages


@dataclass(frozen=True)
class Link:
    url: str  # absolute, without the fragment
    filename: str  # the URL's last path segment
    sha256: str | None
    text: str = ""  # the anchor's text (PEP 503 pages give the file name there)


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None
        self._text = ""

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href") or None
            self._text = ""

    def handle_data(self, data):
        if self._href is not None:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            self.anchors.append((self._href, self._text.strip()))
            self._href = None


def parse_links(html: str, page_url: str) -> list[Link]:
    """Every link of an HTML page (a find-links page, a PEP 503 listing), resolved against ``page_url``, with
    the sha256 its fragment names; the farm's sdist lookup reads index pages with it too."""
    parser = _Anchors()
    parser.feed(html)
    parser.close()
    links = []
    for href, text in parser.anchors:
        url, _, fragment = urllib.parse.urljoin(page_url, href).partition("#")
        filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        m = re.search(r"(?:^|&)sha256=([0-9a-fA-F]{64})(?:&|$)", fragment)
        links.append(Link(url=url, filename=filename, sha256=m.group(1).lower() if m else None, text=text))
    return links


# ---------------------------------------------------------------- URLs and transport


class _Refused(OSError):
    """A URL this module will not fetch (an OSError, so a refused redirect reads as a failed fetch)."""


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_url(url: str, env) -> None:
    """Refuse anything but https, file, or http to a loopback host (unless MAMBA_ALLOW_HTTP=TRUE)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in {"https", "file"}:
        return
    if parts.scheme == "http":
        if _is_loopback(parts.hostname) or _truthy(env.get(ENV_ALLOW_HTTP)):
            return
        raise _Refused(
            f"refusing plain-http {url} (use https, or set {ENV_ALLOW_HTTP}=TRUE to allow it)"
        )
    raise _Refused(f"unsupported URL scheme in {url!r} (expected https://, http://127.0.0.1 or a local path)")


def normalize_root(root: str) -> str:
    """A local directory becomes a ``file://`` URL; the root always ends in ``/``."""
    if "://" not in root:
        try:
            root = Path(root).expanduser().absolute().as_uri()  # not resolve(): keep the published symlink
        except (ValueError, RuntimeError):  # a lone surrogate, a NUL, `~nosuchuser`: check_url refuses it as given
            pass
    return root.rstrip("/") + "/"


class _CheckedRedirect(urllib.request.HTTPRedirectHandler):
    """An https index must not be able to redirect us to plain http."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        check_url(newurl, os.environ)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_CheckedRedirect)


def _open(url: str, timeout: float | None = None):
    if url.startswith("file:"):  # a FIFO or device named index.html would block the open itself, forever
        path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
        if not stat.S_ISREG(os.stat(path).st_mode):  # FileNotFoundError: no such page (a variant without a folder)
            raise _Refused(f"{path} is not a regular file")
    request = urllib.request.Request(url, headers={"User-Agent": "mamba-ssm-setup"})
    return _OPENER.open(request, timeout=timeout or TIMEOUT_S)  # schemes checked by check_url


class _Read1:
    """A response read one socket read at a time: ``read(n)`` on a response waits for all n bytes, so a server
    trickling a byte a second would never let the deadline be checked."""

    def __init__(self, resp) -> None:
        self.resp = resp

    def read(self, n: int) -> bytes:
        read1 = getattr(self.resp, "read1", None)
        return read1(n) if read1 is not None else self.resp.read(n)


def read_page(url: str, timeout: float | None = None) -> str:
    """An index page: at most PAGE_CAP bytes within ``timeout`` seconds overall (Untrusted, a ValueError, else)."""
    deadline = _guard.Deadline(timeout or TIMEOUT_S, url)
    with _open(url, timeout) as resp:
        return _guard.read_capped(_Read1(resp), PAGE_CAP, deadline, network=True).decode("utf-8", "replace")


# ---------------------------------------------------------------- the lookup


@dataclass
class Outcome:
    """What the lookup found. ``wheel`` is set only for a verified wheel."""

    status: str  # "found" | "listed" | "skipped" | "refused" | "unreachable" | "no-match" | "hash-mismatch"
    line: str
    wheel: Path | None = None
    link: Link | None = None
    tried: list[str] = field(default_factory=list)


def _pick(links: list[Link], variant, version: str, machine, glibc) -> Link | None:
    # Local labels compare case-insensitively: packaging normalises "cxx11abiTRUE" to "cxx11abitrue".
    want = {variant.label.lower(): 0, variant.as_stable().label.lower(): 1}
    best = None
    for link in links:
        w = parse_wheel_name(link.filename)
        if w is None or w.name != "mamba_ssm" or w.public != version or (w.local or "").lower() not in want:
            continue
        runs, stable_abi = python_ok(w, variant.python)
        if not runs or not any(platform_ok(p, machine, glibc) for p in w.platforms):
            continue
        rank = (want[w.local.lower()], stable_abi)
        if best is None or rank < best[0]:
            best = (rank, link)
    return best[1] if best else None


def lookup(variant, version: str, *, index_url: str | None = None, env=None, machine=None, glibc=None, timeout=None) -> Outcome:
    """Find the index entry for ``variant`` and ``version`` without downloading it.

    Returns an Outcome with status "listed" and ``link`` set, or the reason there is none."""
    env = os.environ if env is None else env
    public = version.split("+", 1)[0]
    root = normalize_root(index_url or env.get(ENV_INDEX) or default_index_url())
    what = f"mamba-ssm {public} for {variant.key} ({variant.python}, {_platform.machine() if machine is None else machine})"
    try:
        check_url(root, env)
    except _Refused as e:
        return Outcome("refused", f"{PREFIX} {e}; building from source")
    except ValueError as e:  # urlsplit: "Invalid IPv6 URL", a bad port
        return Outcome("refused", f"{PREFIX} the wheel index {root!r} is not a URL ({e}); building from source")

    keys = [variant.key] if variant.stable else [variant.key, variant.as_stable().key]
    tried, links, errors, link = [], [], [], None
    for key in keys:
        page = urllib.parse.urljoin(root, f"{key}/index.html")
        tried.append(page)
        try:
            links += parse_links(read_page(page, timeout), page)
        except urllib.error.HTTPError as e:
            if e.code != 404:
                errors.append(f"{page}: HTTP {e.code}")
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
            # ValueError: a URL urllib will not send, and _guard.Untrusted (too big, too slow);
            # HTTPException: an answer that is not HTTP, or a URL with spaces or CRLF (InvalidURL)
            if isinstance(getattr(e, "reason", None), FileNotFoundError) or isinstance(e, FileNotFoundError):
                continue  # a local index without this variant's folder: no match, not an outage
            errors.append(f"{page}: {getattr(e, 'reason', e)}")
        link = _pick(links, variant, public, machine, glibc)
        if link:
            break

    if link is None:
        if errors and not links:
            return Outcome("unreachable", f"{PREFIX} cannot reach the wheel index ({errors[0]}); building from source", tried=tried)
        return Outcome("no-match", f"{PREFIX} no prebuilt wheel for {what} at {root}; building from source", tried=tried)
    if not link.sha256:
        return Outcome("hash-mismatch", f"{PREFIX} index entry {link.filename} carries no #sha256= to verify; building from source", link=link, tried=tried)
    try:
        check_url(link.url, env)
    except _Refused as e:
        return Outcome("refused", f"{PREFIX} {e}; building from source", link=link, tried=tried)
    return Outcome("listed", f"{PREFIX} {link.filename} is listed at {root}", link=link, tried=tried)


def find_prebuilt(
    variant,
    version: str,
    dest_dir: str | os.PathLike | None = None,
    *,
    index_url: str | None = None,
    env=None,
    machine: str | None = None,
    glibc: tuple[int, int] | None = None,
) -> Outcome:
    """Look up, download and verify the wheel for ``variant`` (a ``_variant.Variant``) and ``version``."""
    env = os.environ if env is None else env
    if _truthy(env.get(ENV_FORCE_BUILD)):
        return Outcome("skipped", f"{PREFIX} {ENV_FORCE_BUILD}=TRUE: not looking for a prebuilt wheel; building from source")
    found = lookup(variant, version, index_url=index_url, env=env, machine=machine, glibc=glibc)
    if found.status != "listed":
        return found
    link, tried = found.link, found.tried
    root = normalize_root(index_url or env.get(ENV_INDEX) or default_index_url())

    dest = Path(dest_dir) if dest_dir else Path(tempfile.mkdtemp(prefix="mamba-ssm-prebuilt-"))
    dest.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix=".part-", dir=dest)
    try:
        deadline, total = _guard.Deadline(DOWNLOAD_DEADLINE_S, link.url), 0
        with os.fdopen(fd, "wb") as out, _open(link.url) as resp:
            while chunk := _Read1(resp).read(1 << 20):
                total += len(chunk)
                if total > WHEEL_CAP:
                    raise _guard.Untrusted(f"more than {WHEEL_CAP >> 30} GiB")
                deadline.left()
                digest.update(chunk)
                out.write(chunk)
        got = digest.hexdigest()
        if got != link.sha256:
            return Outcome(
                "hash-mismatch",
                f"{PREFIX} sha256 mismatch for {link.filename} (index says {link.sha256[:16]}..., download is {got[:16]}...); "
                "refusing it and building from source",
                link=link,
                tried=tried,
            )
        final = dest / link.filename
        os.replace(tmp, final)
        tmp = None
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
        return Outcome("unreachable", f"{PREFIX} cannot download {link.url} ({getattr(e, 'reason', e)}); building from source", link=link, tried=tried)
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
    return Outcome("found", f"{PREFIX} using prebuilt wheel {link.filename} (sha256 verified) from {root}", wheel=final, link=link, tried=tried)


def for_setup(version: str, dest_dir=None, *, variant=None, stream=None):
    """The setup.py entry point: look up the wheel, print one line, return its path or None.

    ``variant`` is what the installed torch needs (default: read from torch's files, else by importing
    it). ``version`` is what setup.py is about to build (``0.3.0+<label>``). When its label is not the
    one this torch needs (MAMBA_FORCE_CXX11_ABI, MAMBA_SKIP_CUDA_BUILD, MAMBA_LOCAL_VERSION asked for
    something else), the user wants that build, not the published wheel.
    """
    stream = stream or sys.stderr
    if _truthy(os.environ.get(ENV_FORCE_BUILD)):
        return None  # setup.py already knows; nothing to say
    if variant is None:
        try:
            module = load_variant_module()
            variant = module.detect_installed() or module.detect()
        except Exception as e:  # noqa: BLE001 - torch missing or odd: say so and let the source build report it
            print(f"{PREFIX} cannot tell which prebuilt wheel fits ({type(e).__name__}: {e}); building from source", file=stream)
            return None
    local = version.partition("+")[2]
    if local and local.lower() not in (variant.label.lower(), variant.as_stable().label.lower()):
        print(f"{PREFIX} this build asks for {local}, not the {variant.label} that torch needs: building it from source", file=stream)
        return None
    outcome = find_prebuilt(variant, version, dest_dir)
    print(_guard.shown(outcome.line), file=stream, flush=True)  # it quotes the index's own words
    return outcome.wheel
