"""The error-message patterns the classifier knows, as data (Python, not TOML: the doctor runs on 3.10 with the
standard library alone). Each rule has ``kind``, ``patterns``, ``title``, ``why`` and ``fix``; earlier rules
win. Every repeat in a pattern is bounded (``{0,64}``), so hostile pasted text cannot make a search backtrack.
"""

RULES = [
    {
        "kind": "torch-local-pin",
        "patterns": [
            r"No matching distribution found for torch==(?P<public>[0-9][0-9a-z.!]{0,64})\+(?P<local>[a-z0-9.]{1,64})",
            r"Could not find a version that satisfies the requirement torch==(?P<public>[0-9][0-9a-z.!]{0,64})\+(?P<local>[a-z0-9.]{1,64})",
        ],
        "title": "torch is pinned with a local label (torch=={public}+{local}) that the installed torch's distribution does not carry",
        "why": "PyPI's torch is the distribution {public}; only its torch.__version__ says {public}+{local}. pip compares a "
        "pin with the distribution's version, so it does not see the installed torch as meeting the pin, and no index it "
        "reads has a torch {public}+{local}",
        "fix": "torch-pin",
    },
    {
        "kind": "no-matching-distribution",
        "patterns": [
            r"No matching distribution found for (?P<req>[A-Za-z0-9][\w.-]{0,64}(?:[=<>!~]{1,3}[\w.+*!-]{1,128})?)",
            r"Could not find a version that satisfies the requirement (?P<req>[A-Za-z0-9][\w.-]{0,64}(?:[=<>!~]{1,3}[\w.+*!-]{1,128})?)",
        ],
        "title": "no wheel for {req} installs on this machine (axis: {axis})",
        "why": "{axis_detail}",
        "fix": "no-wheel",
    },
    {
        "kind": "resolution-conflict",
        "patterns": [r"ResolutionImpossible", r"conflicting dependencies", r"The conflict is caused by"],
        "title": "the requirements cannot be met together beside this torch (pip's resolver gave up)",
        "why": "a pinned wheel's own requirements (upstream's mamba-ssm asks for triton, transformers and more) need "
        "versions that the installed torch's requirements exclude{conflict}",
        "fix": "conflict",
    },
    {
        "kind": "cuda-runtime-major",
        "patterns": [r"(?P<lib>lib(?:cudart|cublas|cublasLt|cusparse|cufft|curand|nvrtc)\.so\.(?P<major>\d{1,4}))(?:\.\d{1,9}){0,8}: cannot open shared object file"],
        "title": "extension built for CUDA {major}, but no CUDA {major} runtime is loaded",
        "why": "the installed mamba-ssm wheel links {lib}; the torch in this environment ships another CUDA major, "
        "so the wheel was built for a different accelerator variant",
        "fix": "reinstall-variant",
    },
    {
        "kind": "rocm-runtime-missing",
        "patterns": [r"(?P<lib>libamdhip64\.so(?:\.(?P<major>\d{1,4}))?)(?:\.\d{1,9}){0,8}: cannot open shared object file"],
        "title": "the extension was built for ROCm, but no ROCm runtime ({lib}) is loaded",
        "why": "the installed wheel links {lib}, which a ROCm build of torch loads; the torch in this environment is a "
        "CUDA or CPU build, or another ROCm release, so the wheel was built for a different accelerator variant",
        "fix": "reinstall-variant",
    },
    {
        "kind": "rocm-no-binary",
        "patterns": [r"hipErrorNoBinaryForGpu"],
        "title": "the extension has no code for this AMD GPU's gfx target",
        "why": "HIP code objects run only on the gfx target they were built for, and none of the extension's is this GPU's",
        "fix": "rocm-arch",
    },
    {
        "kind": "glibc-too-old",
        "patterns": [r"version [`'‘]?GLIBC_(?P<need>\d{1,4}\.\d{1,4}(?:\.\d{1,4})?)['’]? not found"],
        "title": "this system's glibc is older than the {need} the extension needs (axis: glibc)",
        "why": "the wheel was built on a newer Linux than this one (its manylinux tag promises glibc >= {need}); "
        "{floors}",
        "fix": "older-glibc",
    },
    {
        "kind": "libstdcxx-too-old",
        "patterns": [
            r"version [`'‘]?(?P<need>(?:GLIBCXX_3\.4\.\d{1,4}|CXXABI_1\.3\.\d{1,4}))['’]? not found",
        ],
        "title": "the libstdc++ loaded in this process is older than the extension needs ({need})",
        "why": "a libstdc++.so.6 older than the compiler that built the extension comes first on the loader path "
        "(often the system's or an old conda environment's)",
        "fix": "newer-libstdcxx",
    },
    {
        "kind": "no-kernel-image",
        "patterns": [r"no kernel image is available for execution on the device", r"invalid device function"],
        "title": "the extension has no code for this GPU's architecture",
        "why": "the wheel carries SASS for other compute capabilities and no PTX the driver could JIT for this GPU",
        "fix": "gpu-arch",
    },
    {
        "kind": "torch-not-visible",
        "patterns": [
            # both anywhere in the log (a `.*?` between them backtracked over the whole text at each start)
            (
                r"No module named ['\"]?torch['\"]?",
                (
                    r"pip-build-env|Getting requirements to build wheel|build[- ]isolation|get_requires_for_build|"
                    r"Preparing metadata|pyproject_hooks"
                ),
            ),
        ],
        "title": "torch is not visible to the build (pip's build isolation)",
        "why": "pip builds in a fresh isolated environment without your torch; mamba-ssm must be built against "
        "the torch you already have",
        "fix": "no-build-isolation",
    },
    {
        "kind": "torch-missing",
        "patterns": [r"No module named ['\"]?torch['\"]?(?![._\w])"],
        "title": "torch is not installed in this Python environment",
        "why": "mamba-ssm needs torch installed first",
        "fix": "install-torch",
    },
    {
        "kind": "cuda-version-mismatch",
        "patterns": [
            r"detected CUDA version \((?P<nvcc>[\d.]{1,16})\) mismatches the version that was used to compile\s{1,16}PyTorch \((?P<torch>[\d.]{1,16})\)"
        ],
        "title": "nvcc is CUDA {nvcc} but torch was built with CUDA {torch}",
        "why": "a source build must use a toolkit with the same CUDA major as torch",
        "fix": "matching-nvcc",
    },
    {
        "kind": "nvcc-missing",
        "patterns": [
            r"CUDA_HOME environment variable is not set",
            r"nvcc was not found",
            r"name 'bare_metal_version' is not defined",
            r"No such file or directory: '[^'\n]{0,1024}/bin/nvcc'",
            r"nvcc: (?:command )?not found",
        ],
        "title": "no CUDA compiler (nvcc) for a source build",
        "why": "building the CUDA extension from source needs the CUDA toolkit matching torch's CUDA major",
        "fix": "install-nvcc",
    },
    {
        "kind": "nvcc-unsupported-arch",
        "patterns": [r"nvcc fatal[ \t]{0,16}:[ \t]{0,16}Unsupported gpu architecture '(?P<arch>compute_\w{1,16})'"],
        "title": "this nvcc cannot compile for {arch}",
        "why": "the requested GPU architecture is newer (or older) than this CUDA toolkit supports",
        "fix": "arch-list",
    },
    {
        "kind": "cxx20-required",
        "patterns": [r"C\+\+20 or later compatible compiler is required"],
        "title": "the compiler is not in C++20 mode, which this torch (2.14+) requires",
        "why": "torch >= 2.14 headers refuse C++17; an old GCC (< 10) or an explicit -std=c++17 causes this",
        "fix": "cxx20",
    },
    {
        "kind": "gcc-too-new-for-nvcc",
        "patterns": [r"unsupported GNU version! gcc versions later than (?P<max>\d{1,3}) are not supported"],
        "title": "nvcc does not accept this GCC (it supports up to GCC {max})",
        "why": "each CUDA toolkit supports a range of host compilers",
        "fix": "older-gcc",
    },
    {
        "kind": "extension-missing",
        "patterns": [r"No module named ['\"]?(?P<module>(?:mamba_ssm\.)?\w{0,64}?(?:selective_scan|_C|_ops)\w{0,64})"],
        "title": "the compiled extension ({module}) is not installed",
        "why": "mamba-ssm was installed without its extension (a skipped or failed build, or a source checkout "
        "on sys.path shadowing the installed package)",
        "fix": "reinstall-variant",
    },
    {
        "kind": "off-label-wheel",
        "patterns": [
            (
                r"pip3?[ \t]{1,8}install[ \t][^\n]{0,400}?https?://[^\s'\"]{0,400}?(?P<wheel>(?P<project>mamba_ssm|causal_conv1d)-"
                r"(?P<version>[0-9][0-9a-z.]{0,32})\+(?P<label>(?:cu|hip|cpu)[0-9A-Za-z.]{0,64})-[\w.-]{0,64}\.whl)"
            ),
        ],
        "title": "a wheel taken by URL: {project} {version} built for {label}",
        "why": "a wheel from upstream's GitHub releases is built for one torch, CUDA major and C++ ABI ({label}); under "
        "any other torch it fails with `undefined symbol`, or loads code built for another torch",
        "fix": "off-label",
    },
]
