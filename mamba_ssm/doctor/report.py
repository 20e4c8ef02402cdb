"""Render facts and findings for people (text) and tools (JSON).

Everything shown comes partly from outside (an index page, a wheel's files, an error message, pasted text):
each text line goes through ``shown`` (control and bidi characters escaped, so nothing draws over the
report), and JSON escapes every non-ASCII character (``ensure_ascii``): the data is kept, the bytes are not raw.
"""

from __future__ import annotations

import json

from ..guard import shown

MARK = {"ok": "ok  ", "info": "info", "warn": "warn", "problem": "FAIL"}


def source_words(src: dict) -> str:
    """What a provenance record's ``source`` says, in words (the doctor's report and the farm's summary)."""
    kind = src.get("kind")
    if kind == "sdist":
        return f"sdist {src.get('name')}=={src.get('version')} (sha256 {str(src.get('sha256'))[:12]})"
    if kind == "archive":
        return f"archive {src.get('url')} (sha256 {str(src.get('sha256'))[:12]})"
    if kind == "git":
        return f"git {src.get('url')} at {str(src.get('commit'))[:12]}"
    if kind == "canary":
        return f"canary {src.get('url')} {src.get('branch')} at {str(src.get('commit'))[:12]}"
    dirty = " with uncommitted changes" if src.get("dirty") is True else ""
    return f"checkout {str(src.get('commit') or 'unknown commit')[:12]}{dirty}"


def _built_from(rec) -> str | None:
    """The wheel's provenance record (builder/verifying/provenance.py) in one line; shown safely: it is the wheel's word."""
    if not isinstance(rec, dict):
        return None
    src = rec.get("source") if isinstance(rec.get("source"), dict) else {}
    return shown(f"{source_words(src)}, build {rec.get('id')}, inputs {rec.get('inputs_hash')}", 300)


def _line(label: str, value) -> str:
    return f"  {label:<22} {value if value not in (None, '', []) else '-'}"


def render_text(facts: dict, findings: list, extra: dict) -> str:
    py, plat, torch, tk, cxx, mm = (facts[k] for k in ("python", "platform", "torch", "cuda_toolkit", "compiler", "mamba_ssm"))
    out = ["Environment"]
    out.append(_line("python", f"{py['version']} ({py['tag']}) {py['executable']}"))
    out.append(_line("platform", f"{plat['platform']} glibc {plat['glibc']}"))
    if not torch.get("installed"):
        out.append(_line("torch", "NOT INSTALLED"))
    elif torch.get("import_error"):
        out.append(_line("torch", f"installed but broken: {torch['import_error']}"))
        if torch.get("version"):  # read from its files
            acc = f"CUDA {torch['cuda']}" if torch.get("cuda") else f"HIP {torch['hip']}" if torch.get("hip") else "CPU"
            out.append(_line("torch files say", f"{torch['version']} ({acc}); needs variant {(torch.get('variant') or {}).get('key')}"))
    else:
        acc = f"CUDA {torch['cuda']}" if torch.get("cuda") else f"HIP {torch['hip']}" if torch.get("hip") else "CPU"
        abi = {True: "CXX11 ABI", False: "pre-CXX11 ABI", None: "ABI unknown"}[torch.get("cxx11abi")]
        out.append(_line("torch", f"{torch['version']} ({acc}, {abi}{', NGC' if torch.get('ngc') else ''})"))
        out.append(_line("needs variant", (torch.get("variant") or {}).get("key")))
        gpus = torch.get("gpus") or []
        gpu_text = "; ".join(
            f"{g['index']}: {g['name']} (cc {g['capability']}{', ' + g['gfx'] if g.get('gfx') else ''})" for g in gpus
        )
        out.append(_line("GPUs", gpu_text or ("none visible" + (f" ({torch['gpu_error']})" if torch.get("gpu_error") else ""))))
    nvcc = tk.get("nvcc_on_path")
    out.append(_line("nvcc on PATH", f"{nvcc} -> CUDA {tk.get('nvcc_release')} at {tk.get('nvcc_toolkit')}" if nvcc else None))
    out.append(_line("CUDA_HOME", f"{tk['cuda_home']} (CUDA {tk.get('cuda_home_release')})" if tk.get("cuda_home") else None))
    out.append(_line("C++ compiler", cxx.get("version")))
    out.append("mamba-ssm")
    out.append(_line("installed", mm.get("installed_version") or mm.get("metadata_error") or "not installed as a distribution"))
    out.append(_line("location", mm.get("location")))
    out.append(_line("variant label", mm.get("label")))
    out.append(_line("built from", _built_from(mm.get("provenance"))))
    for ext in mm.get("extensions") or []:
        a = ext.get("archs") or {}
        archs = ", ".join(a.get("sass", []) + a.get("ptx", []) + a.get("hip", [])) or "none (CPU build)"
        out.append(_line("extension", f"{ext['module']} {ext['path']}"))
        out.append(_line("  archs", archs))
        out.append(_line("  C++ ABI", {"cxx11": "CXX11", "pre-cxx11": "pre-CXX11"}.get(ext.get("abi"), ext.get("abi"))))
        imp = ext.get("import") or {}
        out.append(_line("  imports", "yes" if imp.get("ok") else f"NO: {imp.get('error')}"))
    out.append(_line("prebuilt wheel", {True: f"indexed ({extra.get('wheel_lookup')})", False: "none indexed for this variant",
                                        None: f"unknown ({extra.get('wheel_lookup')})"}[extra.get("wheel_available")]))
    out.append("Checks")
    for f in findings:
        out.append(f"  [{MARK[f.verdict]}] {f.title}")
        if f.verdict in ("problem", "warn") and f.detail:
            out.append(f"         why: {f.detail}")
        if f.verdict in ("problem", "warn") and f.fix:
            out.append(f"         fix: {f.fix}")
    problems = sum(f.verdict == "problem" for f in findings)
    out.append("Verdict: " + ("healthy" if not problems else f"{problems} problem(s) found"))
    return _lines(out)


def _lines(out: list[str]) -> str:
    """One line per item, each neutralised: a value holding a newline or ESC stays on its own line, visibly."""
    return "".join(shown(line, limit=20_000) + "\n" for line in out)


def utf8(value):
    """``value`` with every string valid Unicode: a lone surrogate (a non-UTF-8 file name, as Python decodes it)
    becomes the escape of the byte it stands for (``\\xff``), so the JSON is valid UTF-8 for any parser."""
    if isinstance(value, str):
        if not any("\ud800" <= c <= "\udfff" for c in value):
            return value
        return "".join(_byte_escape(c) if "\ud800" <= c <= "\udfff" else c for c in value)
    if isinstance(value, dict):
        return {utf8(k): utf8(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [utf8(v) for v in value]
    return value


def _byte_escape(c: str) -> str:
    """A surrogate as text: ``\\xff`` for the byte Python's file-name decoding stood it for, else ``\\ud800``."""
    return f"\\x{ord(c) - 0xDC00:02x}" if "\udc80" <= c <= "\udcff" else f"\\u{ord(c):04x}"


def render_json(facts: dict, findings: list, extra: dict, exit_code: int) -> str:
    doc = {
        "healthy": exit_code == 0,
        "exit_code": exit_code,
        "facts": facts,
        "findings": [f.as_dict() for f in findings],
        **extra,
    }
    return json.dumps(utf8(doc), indent=2, default=lambda o: utf8(str(o)), ensure_ascii=True) + "\n"


def render_explain(diags: list, as_json: bool, note: str | None = None) -> str:
    """``note``: what of the text was left out of the search (classify.scan_window), said in both forms."""
    if as_json:
        doc = utf8({"recognised": bool(diags), "diagnoses": [d.as_dict() for d in diags], "note": note})
        return json.dumps(doc, indent=2, ensure_ascii=True) + "\n"
    out = [f"note: {note}"] if note else []
    if not diags:
        out.append("Not recognised: no known install/build failure in this text. Run `mamba-doctor` (or `python -m mamba_ssm.doctor`) on the machine itself.")
        return _lines(out)
    for i, d in enumerate(diags):
        out.append(f"{'Diagnosis' if i == 0 else 'Also'} [{d.kind}]: {d.title}")
        out.append(f"  why: {d.why}")
        out.append(f"  fix: {d.fix}")
        out.append(f"  matched: {d.evidence}")
    return _lines(out)
