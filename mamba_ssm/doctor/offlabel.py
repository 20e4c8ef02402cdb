"""Off-label wheels: mamba-ssm or causal-conv1d installed from a URL (upstream's GitHub releases) whose label names
another torch, CUDA major or C++ ABI than the torch installed. Such a wheel imports until a symbol it needs is
missing (`undefined symbol`), or loads and runs code built for another torch. The fix is the farm's pin of the same
release on this cell (pins.py chooses it), or, where the farm does not serve that release here, what does.

The installed dist's ``direct_url.json`` (PEP 610) says it came from a URL; its version's label says what it is
built for. ``--explain`` knows the pasted ``pip install https://.../mamba_ssm-2.2.4+cu12torch2.5...whl`` line
(rules.py's ``off-label-wheel``).
"""

from __future__ import annotations

import importlib.metadata

from ..guard import Untrusted, load_json, shown

PROJECTS = {"mamba-ssm": "mamba_ssm", "causal-conv1d": "causal_conv1d"}  # project -> its facts' key
MAX_DIRECT_URL = 64 << 10


def direct_urls() -> dict[str, str]:
    """{project: the URL it was installed from} for each of PROJECTS installed from a URL (not an index), read
    from its direct_url.json; a file that is not JSON, or holds no URL, is no URL."""
    out = {}
    for project in PROJECTS:
        try:
            raw = importlib.metadata.distribution(project).read_text("direct_url.json")
        except (importlib.metadata.PackageNotFoundError, OSError, ValueError):
            continue
        if not raw or len(raw) > MAX_DIRECT_URL:
            continue
        try:
            doc = load_json(raw, f"{project}'s direct_url.json")
        except Untrusted:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("url"), str) and "dir_info" not in doc:
            out[project] = doc["url"]
    return out


def _pin_fix(project: str, version: str, facts: dict, index_url: str | None) -> str:
    """The farm's wheel of PROJECT VERSION for this cell as a reinstall line; where it does not serve that release
    here, why (the axis) and what does."""
    from .classify import keeping_torch
    from .pins import PinError, answer
    from .requirements import NoCell

    try:
        text, _notes = answer(f"{project}=={version}\n", facts, index_url, "the installed release")
    except NoCell as e:
        return f"{e}"
    except PinError as e:
        return f"{e}; reinstall from the farm's index what it serves: `mamba-doctor --requirements upstream`"
    page = next(ln.split()[1] for ln in text.splitlines() if ln.startswith("--extra-index-url "))
    pins = [ln.split()[0] for ln in text.splitlines() if ln.startswith(f"{project}==")]
    torch_pin = next(ln.split()[0].removeprefix("torch==") for ln in text.splitlines() if ln.startswith("torch=="))
    python = (facts.get("python") or {}).get("executable") or "python"
    # torch pinned as pip sees it (kept, or pip stops) and the wheel's dependencies installed: never --no-deps
    return keeping_torch(python, torch_pin, [project], pins, page)


def findings(facts: dict, index_url: str | None = None) -> list:
    """A problem for each of PROJECTS installed from a URL whose label is not this torch's cell."""
    from .checks import PROBLEM, Finding

    want = (facts.get("torch") or {}).get("variant") or {}
    urls = facts.get("direct_urls") or {}
    out = []
    for project, key in PROJECTS.items():
        dist, url = facts.get(key) or {}, urls.get(project)
        label = dist.get("label")
        if not url or not label or not want.get("label") or label in (want["label"], want.get("stable_label")):
            continue
        version = dist.get("public_version") or ""
        out.append(Finding(
            "off-label", PROBLEM,
            f"{project} {dist.get('installed_version')} was installed from a URL ({shown(url, 200)}) and is built "
            f"for {label}; this torch needs {want['label']}",
            "a wheel from upstream's GitHub releases is built for one torch, CUDA major and C++ ABI; under another "
            "it fails with `undefined symbol`, or loads code built for another torch",
            _pin_fix(project, version, facts, index_url), "off-label-wheel",
        ))  # fmt: skip
    return out


def explain_fix(groups: dict) -> str:
    """--explain's fix for a pasted `pip install <wheel URL>` line: the same release, the farm's wheel for the
    torch of the machine it runs on (the doctor there knows it)."""
    project = (groups.get("project") or "mamba_ssm").lower().replace("_", "-")
    version = groups.get("version") or ""
    return (f"do not install a wheel by URL unless its label ({groups.get('label', '')}) is this torch's cell; on "
            f"the machine, `echo '{project}=={version}' | mamba-doctor --requirements -` prints the farm's {project} "
            f"{version} for the torch installed there (or, where the farm does not serve that release beside it, "
            "why and the nearest release it serves)")  # fmt: skip
