"""Builds in containers through the docker SDK: one image per toolchain (tagged by its Dockerfile's hash,
reused), a fresh container per BuildSpec with the source copied in, the wheel and log copied out, and the
container always removed (``cleanup()`` from ``finally`` and the signal handlers; a new run removes the
leftovers of dead runs).
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import tarfile
import tempfile
import threading
import time
from pathlib import Path

from builder.building.executors import (
    BUILD_SCRIPT,
    GLIBC_FLOOR,
    KERNEL_CACHE_MOUNT,
    BuildOptions,
    BuildResult,
    collect_wheel,
    kernel_cache_name,
    source_files,
    spec_env,
    toolchain_record,
)
from builder.building.images.base_image import resolve_base
from builder.building.images.engine import build_image, made_once
from builder.building.images.images import (
    BUILD_LABEL,
    IMAGE_LABEL,
    LABEL,
    OWNER_LABEL,
    check_substitute,
    docker_platform,
    effective_toolkit_source,
    fallback_suite,
    is_local_base,
    local_suite,
    owner,
)
from builder.building.images.render import image_python, load_packages, render
from builder.environments import build_torch, interpreters
from builder.errors import FarmError, InfrastructureError
from builder.facts import timings
from builder.facts.compat import machine_of
from builder.facts.cputime import CGROUP_CPU_FILE, CGROUP_CPU_SH, parse_cgroup_cpu
from builder.facts.hostenv import CACHE_ROOT, host_machine, host_pip_settings
from builder.sourcing.reproducible import tree_epoch

PIP_CACHE_VOLUME = "mamba-farm-pip-cache"


def _torch_name(spec) -> str:
    return f"mamba-farm-torch-{spec.python_tag}-{spec.torch_version}-{spec.accelerator}"


def torch_folder(spec) -> Path:
    """The host folder ``<farm cache>/torch/<torch_store's volume name>-<machine>`` that holds SPEC's torch where a
    volume does not: another machine's (``build_torch.fetched_for_target``), or this one's smoke venv linked
    (``build_torch.linked_from_store``)."""
    return CACHE_ROOT / "torch" / f"{_torch_name(spec)}-{machine_of(spec.platform)}"


def torch_store(spec) -> str:
    """Where SPEC's torch lives, mounted read-only at /torch by its builds and smoke test: the docker volume
    ``mamba-farm-torch-<python>-<torch>-<accelerator>`` for this host's machine (unless its smoke venv can be
    linked: ``build_torch.linked_from_store``); for another machine's, its ``torch_folder``, which this host's pip
    fills."""
    return _torch_name(spec) if machine_of(spec.platform) == host_machine() else str(torch_folder(spec))


def native_python(cross: dict | None, spec) -> dict[str, str]:
    """The environment that runs an emulated image's build on its x86_64 twin of the image's Python
    (render.cross_compiler): for the checkout's own builds (setup.py reads torch from its files; a recipe's
    setup.py imports torch, which only the image's Python can), of that Python's version. Empty: emulated."""
    python = cross and cross.get("python")
    if not python or spec.from_recipe or python["version"] != spec.python:
        return {}
    return {
        "FARM_PYTHON": f"{python['venv']}/bin/python",
        "_PYTHON_SYSCONFIGDATA_NAME": python["sysconfigdata"],
        "_PYTHON_HOST_PLATFORM": python["platform"],
    }


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers(client, log=print) -> int:
    """Remove farm containers whose owning process on this host is gone (a killed earlier run)."""
    removed = 0
    host = socket.gethostname()
    # Only build containers carry an owner; image-build intermediates (which inherit the
    # image's labels) belong to whoever is building that image and are left alone.
    # ignore_removed: the listing inspects each container, and another run may remove one in between
    for c in client.containers.list(all=True, filters={"label": OWNER_LABEL}, ignore_removed=True):
        h, _, pid = c.labels.get(OWNER_LABEL, "").rpartition(":")
        if h == host and pid.isdigit() and _pid_alive(int(pid)):
            continue  # a concurrent run's container: not ours to touch
        try:
            c.remove(force=True)
            removed += 1
        except Exception:
            pass
    if removed:
        log(f"docker: removed {removed} container(s) left by an earlier run")
    return removed


def source_tar(source: Path) -> bytes:
    """The source tree as a tar rooted at src/, plus the build script at farm/build.sh and its glibc floor
    source beside it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in source_files(source):
            tar.add(source / rel, arcname=f"src/{rel}", recursive=False)
        tar.add(BUILD_SCRIPT, arcname="farm/build.sh")
        tar.add(GLIBC_FLOOR, arcname="farm/glibc_floor.c")
    return buf.getvalue()


class DockerExecutor:
    name = "docker"

    def __init__(self, client, options: BuildOptions) -> None:
        self.client = client
        self.options = options
        self.log = options.log
        self.tags: dict[str, str] = {}  # ImageSpec.id -> image tag
        self.bases: dict[str, str] = {}  # ImageSpec.id -> the base it was built FROM
        self.pythons: dict[str, dict[str, str]] = {}  # ImageSpec.id -> {"3.11": "/opt/python/cp311-cp311/bin/python"}
        self.machines: dict[str, str] = {}  # ImageSpec.id -> the machine its containers run (aarch64: emulated here)
        self.images: dict = {}  # ImageSpec.id -> ImageSpec
        self.crosses: dict[str, dict] = {}  # ImageSpec.id -> its cross compiler (render.cross_compiler), if it has one
        self._containers: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._tars: dict[Path, bytes] = {}
        self._volume_locks: dict[str, threading.Lock] = {}
        self.failed_images: dict[str, str] = {}
        self.pip = host_pip_settings(options.wheelhouses)
        remove_leftovers(client, self.log)

    def ran(self, spec) -> dict:
        """The image and the base it was really built FROM (the farm's Debian base when the planned one could
        not be pulled), and the toolkit that base's image got (effective_toolkit_source)."""
        image, base = self.images[spec.image], self.bases[spec.image]
        toolkit = None
        if image.kind in ("cuda", "rocm"):
            origin = effective_toolkit_source(image, base)
            toolkit = {"kind": image.kind, "version": image.toolkit, "origin": origin}
            if origin == "pypi":
                toolkit["packages"] = list(load_packages()["cuda"]["pypi"][image.toolkit]["packages"])
            elif origin == "debian":
                toolkit["suite"] = local_suite(base) if is_local_base(base) else fallback_suite(image)
        cross = self.crosses.get(spec.image)
        record = toolchain_record("docker", image=spec.image, base=base, compiler="cross" if cross else "image", toolkit=toolkit)
        if cross:  # the image's CC/CXX: the build host's cross compiler, run natively in the emulated container
            record["toolchain"]["cross"] = {"host": cross["host"], "target": cross["target"], "packages": cross["packages"]}
            if native_python(cross, spec):  # pip and setup.py ran on the build host's twin of the image's Python
                record["toolchain"]["cross"]["python"] = f"{cross['host']} CPython {spec.python}"
        return record

    # -- images ---------------------------------------------------------------------------
    def prepare(self, images: dict, specs: list) -> None:
        from builder.building import emulation

        self.images.update(images)
        needed = sorted({s.image for s in specs})
        bases: dict[tuple[str, str, str], str] = {}
        for image_id in needed:
            image = images[image_id]
            machine = machine_of(image.platform)
            if machine != host_machine():
                # Another machine's image runs under emulation (qemu-user, F flag), or not at all.
                ids = ", ".join(s.id for s in specs if s.image == image_id)
                emulation.require(machine, f"image {image_id} (builds: {ids})")
            self.machines[image_id] = machine
            key = (image.base, fallback_suite(image), machine)
            if key not in bases:  # one pull attempt per configured base per run
                bases[key] = resolve_base(
                    self.client, image.base, fallback=key[1], ca_bundle=self.options.ca_bundle, log=self.log,
                    machine=machine,
                )
            check_substitute(image, bases[key])
            r = render(image, base=bases[key])
            if r.cross:
                self.crosses[image_id] = r.cross
            self.tags[image_id] = r.tag
            self.bases[image_id] = bases[key]
            if not made_once(self.client, r.tag, lambda r=r, image_id=image_id: self._make_image(r, image_id)):
                self.log(f"image {image_id}: reusing {r.tag}")
            self.pythons[image_id] = {v: image_python(v) for v in image.pythons}

    def _make_image(self, r, image_id: str) -> None:
        try:
            if r.cross and is_local_base(r.cross["base"]):  # the cross stage's base: the farm's own, this host's
                resolve_base(self.client, r.cross["base"], ca_bundle=self.options.ca_bundle, log=self.log)
            self._build_image(r)
        except InfrastructureError as err:  # only the builds of this image fail
            self.log(f"image {image_id}: FAILED; its builds are skipped (log: {self._image_log(image_id)})")
            self.failed_images[image_id] = str(err).splitlines()[0]

    def _image_log(self, image_id: str) -> Path | None:
        return self.options.logs_dir / f"image-{image_id}.log" if self.options.logs_dir else None

    def _build_image(self, r) -> None:
        """Build R's image from a context of its Dockerfile, the CA bundle, the trimmed Pythons and R.files."""
        if self.options.ca_bundle is None:
            raise FarmError("no CA bundle found for the image", hint="pass --ca-bundle FILE")
        self.log(f"image {r.image.id}: building {r.tag} from {r.base}")

        machine = machine_of(r.image.platform)

        def stage(ctx: Path) -> None:
            for py in r.pythons:
                if py.farm:  # fetched and unpacked once per Python and machine, kept in the farm cache
                    interpreters.provide(interpreters.interpreter(py.version, machine), log=self.log)
                if r.staged or py.farm:
                    stage_python(Path(py.prefix), ctx / "pythons" / py.tag, py.version)

        seconds = build_image(
            self.client, r.tag, r.dockerfile, what=f"image {r.image.id}",
            labels={IMAGE_LABEL: r.image.id},
            files={"ca-bundle.crt": self.options.ca_bundle, **r.files},  # r.files: what else it COPYs (rocm_patch/)
            stage=stage, log_path=self._image_log(r.image.id), error=InfrastructureError,
            # An image with a cross stage names each stage's platform in its FROM lines: docker 20.10's classic
            # builder refuses a COPY --from a stage of another platform than the one the build was asked for.
            platform=docker_platform(machine) if machine != host_machine() and not r.cross else None,
        )  # fmt: skip
        self.log(f"image {r.image.id}: built {r.tag} in {seconds:.0f}s")
        timings.record("image", r.tag, seconds)

    # -- builds ---------------------------------------------------------------------------
    def _mounts(self) -> dict:
        vols = {PIP_CACHE_VOLUME: {"bind": "/root/.cache/pip", "mode": "rw"}}
        for i, wh in enumerate(self.options.wheelhouses):
            vols[str(Path(wh).resolve())] = {"bind": str(Path(wh).resolve()), "mode": "ro"}
        for d in self.pip.local_dirs:
            vols[str(d)] = {"bind": str(d), "mode": "ro"}
        for host_dir, mount in self.options.cache_mounts.items():
            vols[str(host_dir)] = {"bind": mount, "mode": "rw"}
        return vols

    def _torch_volume(self, spec, log_path: Path, timeout: float) -> tuple[str, BuildResult | None]:
        """Where torch (with all its deps) is for SPEC's Python, filled once and reused: a volume or a host folder.

        Builds mount it read-only: the GBs of a CUDA torch are installed once per
        (Python, torch) instead of once per build, and survive across runs. This host's machine's
        torch is its smoke test's venv, linked into a host folder where it can be
        (``build_torch.linked_from_store``); another machine's is a host folder filled by this host's pip
        (``build_torch.fetched_for_target``): no emulation.
        """
        import docker.errors
        from filelock import FileLock

        store = torch_store(spec)
        foreign = store.startswith("/")
        name = Path(store).name
        with self._lock:
            lock = self._volume_locks.setdefault(name, threading.Lock())
        # The volume is the engine's, shared by every farm run on this host (two jobs of a rehearsed release,
        # two maintainers): a host-wide lock, or one run's refill (rm -rf /torch/site) pulls torch from under
        # another run's build ("No module named 'torch'", seen in the release rehearsal).
        locks = CACHE_ROOT / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with lock, FileLock(str(locks / f"{name}.lock")):
            if foreign:
                reason = build_torch.fetched_for_target(spec, Path(store), log_path, timeout, log=self.log)
                return store, (BuildResult(False, None, log_path, reason, infrastructure=True) if reason else None)
            if (linked := build_torch.linked_from_store(spec, torch_folder(spec), log_path, log=self.log)) is not None:
                return linked, None
            try:
                self.client.volumes.get(name)
                probe = self._run(spec, ["test", "-f", "/torch/.ready"], {}, {name: {"bind": "/torch", "mode": "ro"}}, None, 120)
                if probe == 0:
                    return name, None
            except docker.errors.NotFound:
                self.client.volumes.create(name, labels={LABEL: "1"})
            script = (
                'rm -rf /torch/site /torch/.ready && "$FARM_PYTHON" -m pip install --no-compile --target /torch/site '
                '$FARM_TORCH_PIP_ARGS "$FARM_TORCH_REQ" && touch /torch/.ready || exit 75'
            )
            env = self._env(spec)
            with open(log_path, "ab") as f:
                f.write(f"== installing {env['FARM_TORCH_REQ']} for {spec.python_tag} into volume {name} (once)\n".encode())
            started = time.monotonic()
            code = self._run(spec, ["bash", "-c", script], env, {name: {"bind": "/torch", "mode": "rw"}}, log_path, timeout)
            timings.record("torch", f"volume {name}", time.monotonic() - started)
            if code != 0:
                return name, BuildResult(
                    False, None, log_path, f"could not install {env['FARM_TORCH_REQ']} (exit {code})", infrastructure=True
                )
            return name, None

    def _env(self, spec) -> dict[str, str]:
        env = {**self.pip.env(), **spec_env(spec, max_jobs=self.options.max_jobs)}
        env.update(
            FARM_PYTHON=self.pythons[spec.image][spec.python],
            FARM_SRC="/src",
            FARM_OUT="/out",
            PIP_CACHE_DIR="/root/.cache/pip",
            PIP_NO_CACHE_DIR="0",
        )
        return env

    def _build_config(self, spec, torch_volume: str) -> tuple[dict[str, str], dict]:
        """Environment and extra volumes of SPEC's build container (besides ``_mounts()``)."""
        env = self._env(spec)
        # torch is already in the volume: build.sh skips its install step.
        env.update(FARM_TORCH_REQ="", PYTHONPATH="/torch/site", MAMBA_KERNEL_CACHE=KERNEL_CACHE_MOUNT)
        native = native_python(self.crosses.get(spec.image), spec)
        if native:  # pip and setup.py natively; the image's own Python still checks that torch imports
            env.update(native, FARM_TARGET_PYTHON=self.pythons[spec.image][spec.python])
        volumes = {
            torch_volume: {"bind": "/torch", "mode": "ro"},
            # shared by every build of this image: kernels compile once, only the binding per variant
            kernel_cache_name(spec.image): {"bind": KERNEL_CACHE_MOUNT, "mode": "rw"},
        }
        return env, volumes

    def _ensure_volume(self, name: str) -> None:
        """Create volume NAME with the farm's label unless it exists (docker would make it unlabelled)."""
        import docker.errors

        with self._lock:
            try:
                self.client.volumes.get(name)
            except docker.errors.NotFound:
                self.client.volumes.create(name, labels={LABEL: "1"})

    def _run(self, spec, command, env, extra_volumes, log_path, timeout, archive=None, out_dir=None, on_exit=None):
        """Run one container to completion; returns its exit code (or a BuildResult via exceptions).

        The container is tracked from creation and removed in ``finally``; ``on_exit(container)`` reads what it
        left (its stopped filesystem) before that.
        """
        container = None
        try:
            with self._lock:
                if self._closed:
                    raise _Interrupted
                machine = self.machines.get(spec.image, host_machine())
                container = self.client.containers.create(
                    self.tags[spec.image],
                    **({"platform": docker_platform(machine)} if machine != host_machine() else {}),
                    command=command,
                    environment=env,
                    labels={LABEL: "1", OWNER_LABEL: owner(), BUILD_LABEL: spec.id},
                    volumes={**self._mounts(), **extra_volumes},
                    working_dir="/src",
                    detach=True,
                )
                self._containers.add(container.id)
            if archive is not None:
                container.put_archive("/", archive)
            container.start()
            pump = None
            if log_path is not None:
                pump = threading.Thread(target=_pump_logs, args=(container, log_path), daemon=True)
                pump.start()
            try:
                code = int(container.wait(timeout=timeout).get("StatusCode", 1))
            except Exception as err:  # requests' ReadTimeout: past its limit (or removed by cleanup)
                if self._closed:
                    raise _Interrupted from None
                if "timed out" in str(err).lower() or "timeout" in type(err).__name__.lower():
                    container.kill()
                    raise _TimedOut from None
                raise
            if pump is not None:
                pump.join(30)
            if self._closed:
                raise _Interrupted
            if code == 0 and out_dir is not None:
                _copy_wheel_out(container, out_dir)
            if on_exit is not None:
                on_exit(container)
            return code
        finally:
            if container is not None:
                self._remove(container.id)

    def build(self, spec, source: Path, out_dir: Path, log_path: Path, timeout: float) -> BuildResult:
        import docker.errors

        log_path.parent.mkdir(parents=True, exist_ok=True)
        if spec.image in self.failed_images:
            image_log = self._image_log(spec.image)
            log_path.write_text(f"== the toolchain image failed to build: {self.failed_images[spec.image]}\n== see {image_log}\n")
            return BuildResult(False, None, log_path, f"image {spec.image} failed to build")
        started = time.monotonic()
        try:
            volume, failed = self._torch_volume(spec, log_path, timeout)
            if failed is not None:
                return failed
            if source not in self._tars:
                self._tars[source] = source_tar(source)
            self._ensure_volume(kernel_cache_name(spec.image))
            env, volumes = self._build_config(spec, volume)
            env["SOURCE_DATE_EPOCH"] = str(tree_epoch(source))  # the source's time, never the clock's
            remaining = max(60.0, timeout - (time.monotonic() - started))
            wheel_dir = Path(tempfile.mkdtemp(prefix="out-", dir=out_dir.parent if out_dir.parent.exists() else None))
            cpu: list[float | None] = [None]
            try:
                # build.sh, then the container's own CPU counter, read while its cgroup still exists
                command = ["bash", "-c", f"bash /farm/build.sh; rc=$?; {CGROUP_CPU_SH}; exit $rc"]
                code = self._run(
                    spec, command, env, volumes, log_path, remaining, archive=self._tars[source], out_dir=wheel_dir,
                    on_exit=lambda c: cpu.__setitem__(0, _cgroup_cpu(c)),
                )
                result = collect_wheel(code, wheel_dir, out_dir, log_path)
                result.cpu_seconds, result.measured = cpu[0], "cgroup" if cpu[0] is not None else "none"
                return result
            finally:
                shutil.rmtree(wheel_dir, ignore_errors=True)
        except _Interrupted:
            return BuildResult(False, None, log_path, "interrupted", infrastructure=True)
        except _TimedOut:
            return BuildResult(False, None, log_path, f"timed out after {timeout:.0f}s", timed_out=True)
        except (docker.errors.DockerException, OSError) as err:
            if self._closed:
                return BuildResult(False, None, log_path, "interrupted", infrastructure=True)
            with open(log_path, "a") as f:
                f.write(f"\n== container engine error: {err}\n")
            return BuildResult(False, None, log_path, f"engine error: {str(err)[:160]}", infrastructure=True)

    # -- what the smoke test hands it (builder/verifying/smoke.py's in_container) -----------
    def smoke_torch(self, spec, log_path: Path, timeout: float) -> str:
        """The torch SPEC's build used (``_torch_volume``), for its smoke test to mount; VerificationError when none."""
        from builder.errors import VerificationError

        store, failed = self._torch_volume(spec, log_path, timeout)
        if failed is not None:
            raise VerificationError(f"smoke test of {spec.id}: {failed.reason}")
        return store

    def run_script(self, spec, script: str, *, files: dict[str, bytes], mounts: dict[str, str], log_path: Path,
                   timeout: float) -> int:  # fmt: skip
        """Run the bash SCRIPT in a fresh container of SPEC's image (``$FARM_PYTHON`` its Python, no PYTHONPATH):
        FILES (path under / -> bytes) put in first, MOUNTS (volume or host folder -> where) read-only, its output
        appended to LOG_PATH; its exit code, TimeoutError past TIMEOUT."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        env = {k: v for k, v in self._env(spec).items() if k != "PYTHONPATH"}
        volumes = {src: {"bind": dest, "mode": "ro"} for src, dest in mounts.items()}
        try:
            return self._run(spec, ["bash", "-c", script], env, volumes, log_path, timeout, archive=buf.getvalue())
        except _TimedOut:
            raise TimeoutError(f"{spec.id}: past {timeout:.0f}s") from None

    def _remove(self, cid: str) -> None:
        try:
            self.client.api.remove_container(cid, force=True, v=True)
        except Exception:
            pass
        with self._lock:
            self._containers.discard(cid)

    def cleanup(self) -> None:
        """Remove every container this run started (idempotent; safe from a signal handler)."""
        with self._lock:
            self._closed = True
            ids = list(self._containers)
        for cid in ids:
            self._remove(cid)
        try:  # anything labelled with our owner that slipped through (created, not yet tracked)
            mine = {"label": f"{OWNER_LABEL}={owner()}"}
            for c in self.client.containers.list(all=True, filters=mine, ignore_removed=True):
                c.remove(force=True)
        except Exception:
            pass


class _Interrupted(Exception):
    pass


class _TimedOut(Exception):
    pass


def _pump_logs(container, log_path: Path) -> None:
    with open(log_path, "ab") as f:
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                f.write(chunk)
                f.flush()
        except Exception:
            pass


def _cgroup_cpu(container) -> float | None:
    """The CPU seconds the build's container used (builder.facts.cputime.CGROUP_CPU_SH's file), None if it left none."""
    try:
        stream, _ = container.get_archive(CGROUP_CPU_FILE)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream)[: 1 << 16])) as tar:
            member = tar.next()
            data = tar.extractfile(member).read(256) if member is not None and member.isfile() else b""
    except Exception:  # no counter on this engine: the build stands, without a figure
        return None
    return parse_cgroup_cpu(data.decode("ascii", "replace"))


def _copy_wheel_out(container, out_dir: Path) -> Path | None:
    stream, _ = container.get_archive("/out")
    buf = io.BytesIO(b"".join(stream))
    out_dir.mkdir(parents=True, exist_ok=True)
    found = None
    with tarfile.open(fileobj=buf) as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.endswith(".whl"):
                data = tar.extractfile(m).read()
                dest = out_dir / Path(m.name).name
                tmp = dest.with_suffix(".whl.part")
                tmp.write_bytes(data)
                os.replace(tmp, dest)
                found = dest
    return found


# Parts of a pyenv install a build never needs (the test suite, GUI toolkits, the
# host's installed packages: ensurepip gives the image a clean pip).
_SKIP_DIRS = {"test", "tests", "site-packages", "idlelib", "tkinter", "turtledemo", "__pycache__", "ensurepip_skip"}


def stage_python(prefix: Path, dest: Path, version: str) -> None:
    if not (prefix / "bin" / "python3").exists():
        raise FarmError(
            f"Python {version} is not installed on this host (looked for {prefix})",
            hint=f"pyenv install {version}, or drop Python {version} from the profile",
        )
    libdir = f"lib/python{version}"

    def ignore(dirpath: str, names: list[str]) -> set[str]:
        rel = os.path.relpath(dirpath, prefix)
        skip = set()
        if rel == libdir:
            skip |= {n for n in names if n in _SKIP_DIRS}
        if rel == "bin":
            skip |= {n for n in names if not n.startswith("python")}  # ensurepip writes pip anew
        if rel.startswith(f"{libdir}/config-"):
            skip |= {n for n in names if n.endswith(".a")}
        skip |= {n for n in names if n == "__pycache__"}
        return skip

    shutil.copytree(prefix, dest, symlinks=True, ignore=ignore)
    (dest / libdir / "site-packages").mkdir(parents=True, exist_ok=True)
