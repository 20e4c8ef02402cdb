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

from builder.building import interpreters
from builder.building.driver import timings
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
    machine_of,
    owner,
)
from builder.building.images.render import image_python, load_packages, render
from builder.errors import FarmError, InfrastructureError
from builder.facts.compat import manylinux_platforms
from builder.facts.cputime import CGROUP_CPU_FILE, CGROUP_CPU_SH, parse_cgroup_cpu
from builder.facts.hostenv import CACHE_ROOT, host_machine, host_pip_settings
from builder.facts.untrusted import Untrusted
from builder.sourcing.reproducible import tree_epoch

PIP_CACHE_VOLUME = "mamba-farm-pip-cache"


def _torch_name(spec) -> str:
    return f"mamba-farm-torch-{spec.python_tag}-{spec.torch_version}-{spec.accelerator}"


def torch_folder(spec) -> Path:
    """The host folder ``<farm cache>/torch/<torch_store's volume name>-<machine>`` that holds SPEC's torch where a
    volume does not: another machine's (``_foreign_torch``), or this one's smoke venv linked (``_linked_torch``)."""
    return CACHE_ROOT / "torch" / f"{_torch_name(spec)}-{machine_of(spec.platform)}"


def torch_store(spec) -> str:
    """Where SPEC's torch lives, mounted read-only at /torch by its builds and smoke test: the docker volume
    ``mamba-farm-torch-<python>-<torch>-<accelerator>`` for this host's machine (unless its smoke venv can be
    linked: ``_linked_torch``); for another machine's, its ``torch_folder``, which this host's pip fills."""
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


def target_environment(machine: str, python: str) -> dict[str, str]:
    """The environment markers of CPython PYTHON (3.11) on Linux on MACHINE (aarch64), as packaging names them."""
    from packaging.markers import default_environment

    return {
        **default_environment(), "platform_machine": machine, "platform_system": "Linux", "sys_platform": "linux",
        "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython",
        "python_version": python, "python_full_version": f"{python}.0", "implementation_version": f"{python}.0",
        "platform_release": "", "platform_version": "",
    }  # fmt: skip


def wheel_manylinux(wheel: Path, spec) -> str:
    """The newest PEP 600 manylinux tag WHEEL's name carries (what it was repaired to: the systems it runs on), else
    SPEC's planned one."""
    from builder.verifying.wheels import newest_manylinux

    return newest_manylinux(wheel.name) or spec.manylinux


def target_requirements(site: Path, project: str, machine: str, python: str) -> list[str]:
    """PROJECT's requirements (its installed METADATA under SITE, outside data: capped, parsed strictly) whose
    markers hold on MACHINE (aarch64) with CPython PYTHON (3.11) on Linux, extras left out."""
    from email.parser import HeaderParser

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    from builder.facts.untrusted import read_regular, shown

    infos = [p for p in site.glob("*.dist-info") if canonicalize_name(p.name.split("-")[0]) == canonicalize_name(project)]
    if len(infos) != 1:
        raise InfrastructureError(f"{project}: {len(infos)} .dist-info folders under {site}, not one")
    where = infos[0] / "METADATA"
    try:
        text = read_regular(where, 4 << 20).decode("utf-8")
    except (Untrusted, OSError, UnicodeDecodeError) as err:
        raise InfrastructureError(f"{where}: cannot be read ({shown(err, 300)})") from None
    env = {**target_environment(machine, python), "extra": ""}
    out = []
    for line in HeaderParser().parsestr(text).get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement as err:
            raise InfrastructureError(f"{where}: a Requires-Dist pip cannot read: {shown(line, 200)} ({shown(err, 200)})") from None
        if req.marker is None or req.marker.evaluate(env):
            req.marker = None
            out.append(str(req))
    return out


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
        torch is its smoke test's venv, linked into a host folder where it can be (``_linked_torch``);
        another machine's is a host folder filled by this host's pip (``_foreign_torch``): no emulation.
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
                return self._foreign_torch(spec, Path(store), log_path, timeout)
            if (linked := self._linked_torch(spec, log_path)) is not None:
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

    def _linked_torch(self, spec, log_path: Path) -> str | None:
        """This host's machine, torch from where this host's pip finds it (the build's requirement is the smoke
        test's): the host smoke test's torch venv (made now if need be) linked into a host folder that builds mount
        at /torch (``cache.torch_folder``), so torch is installed once, and on disk once, for a build and its smoke
        test. None, and the volume as before, where the build's pip would read torch's own index, where this host
        has no CPython of SPEC's version, or where a wheel in the venv needs a newer glibc than the image's."""
        from filelock import FileLock

        from builder.building import cache
        from builder.verifying.wheels import manylinux_glibc, marker_environment

        farm = spec_env(spec, max_jobs=1)
        if farm["FARM_TORCH_PIP_ARGS"]:
            return None
        folder = torch_folder(spec)
        requirement, why = farm["FARM_TORCH_REQ"], None
        if not (folder / ".ready").is_file():
            slot = cache.smoke_slot(spec.python_tag, spec.torch_version)
            try:
                python3 = str(interpreters.python_prefix(spec.python, log=self.log) / "bin" / "python3")
                slot.mkdir(parents=True, exist_ok=True)
                with FileLock(str(slot) + ".lock"):  # the smoke test's own lock on its venvs
                    venv = cache.torch_venv(python3, requirement, slot / "torch-envs")
                    glibc = manylinux_glibc(spec.manylinux)
                    why = cache.torch_folder(venv, folder, requirement, marker_environment(python3), glibc)
            except (FarmError, Untrusted, OSError, ValueError) as err:
                why = str(err).splitlines()[0] if str(err) else type(err).__name__
        with open(log_path, "ab") as f:
            linked = f"{folder}, linked from the smoke test's venv"
            said = f"not linked from the smoke test's venv ({why})" if why else linked
            f.write(f"== {requirement} for {spec.python_tag}: {said}\n".encode())
        return None if why else str(folder)

    def _foreign_torch(self, spec, folder: Path, log_path: Path, timeout: float) -> tuple[str, BuildResult | None]:
        """Another machine's torch in the host FOLDER (``torch_store``, bind-mounted at /torch like a volume),
        installed by this host's pip, natively: wheels picked for SPEC's platform and Python
        (``--platform``, ``--python-version``, ``--only-binary :all:``). An emulated pip took most of a cold
        aarch64 run. pip judges markers by the machine it runs on, so torch goes in alone and its requirements
        follow, their markers judged for SPEC's machine (``target_requirements``). Builds mount it read-only, so
        Python cannot cache bytecode there (under emulation torch's import compiles its .py files in a minute and
        a half, three times a build and its smoke test): a host Python of SPEC's version compiles them once
        (bytecode is the same on every machine)."""
        import subprocess
        import sys

        name = folder.name
        if (folder / ".ready").is_file():
            return str(folder), None
        farm = spec_env(spec, max_jobs=1)  # what build.sh would be given: the requirement, torch's index
        requirement = farm["FARM_TORCH_REQ"]
        tmp = folder.with_name(f".{name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "site").mkdir(parents=True)
        started = time.monotonic()
        pip = [
            sys.executable, "-m", "pip", "install", "--no-compile", "--target", str(tmp / "site"), "--only-binary", ":all:",
            *(a for tag in manylinux_platforms(spec.manylinux) for a in ("--platform", tag)),
            "--python-version", spec.python, "--implementation", "cp",
            *farm["FARM_TORCH_PIP_ARGS"].split(),
        ]  # fmt: skip
        reason = None
        with open(log_path, "ab") as f:
            f.write(f"== installing {requirement} for {spec.python_tag} {spec.platform} natively into {folder} (once)\n".encode())
            f.flush()

            def run(cmd: list[str]) -> int:
                try:
                    return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, check=False).returncode
                except subprocess.TimeoutExpired:
                    return 124

            if (code := run([*pip, "--no-deps", requirement])) != 0:
                reason = f"could not install {requirement} (pip exit {code})"
            else:
                try:
                    needs = target_requirements(tmp / "site", "torch", machine_of(spec.platform), spec.python)
                except FarmError as err:
                    needs, reason = [], str(err).splitlines()[0]
                f.write(f"== its requirements on {machine_of(spec.platform)}: {' '.join(needs) or 'none'}\n".encode())
                f.flush()
                if reason is None and needs and (code := run([*pip, *needs])) != 0:
                    reason = f"could not install {requirement}'s requirements (pip exit {code})"
            if reason is None:
                try:
                    python = interpreters.python_prefix(spec.python, log=self.log) / "bin" / "python3"
                except FarmError as err:  # no host Python of that version: imports compile it, slowly
                    f.write(f"== not byte-compiled: {str(err).splitlines()[0]}\n".encode())
                else:
                    run([str(python), "-m", "compileall", "-q", "-j", "0", str(tmp / "site")])
        if reason is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            return str(folder), BuildResult(False, None, log_path, reason, infrastructure=True)
        (tmp / ".ready").touch()
        shutil.rmtree(folder, ignore_errors=True)
        os.rename(tmp, folder)
        timings.record("torch", f"folder {name} (native pip)", time.monotonic() - started)
        return str(folder), None

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

    # -- smoke test under emulation --------------------------------------------------------
    def smoke(self, spec, wheel: Path, log_path: Path, timeout: float = 1800, recipe=None) -> dict:
        """Smoke-test WHEEL in a container of SPEC's own image (another machine's, under emulation): a
        fresh venv that sees only the torch volume the build used, the wheel installed alone, ``pip check``,
        then builder.verifying.wheels' smoke script (the CPU scan against the float64 reference); for a RECIPE's
        wheel, its imports, public API and commands instead, as on the host. A recipe with ``deps = true`` gets its
        wheel's declared dependencies from a layer this host's pip fetched for the target (``_foreign_deps``),
        mounted read-only at /deps, added with ``site.addsitedir`` and checked by ``pip check`` first. Returns what
        ran (as :func:`builder.verifying.wheels.smoke_test` does; ``imported.emulated``: under emulation)."""
        from filelock import FileLock

        from builder.building import cache
        from builder.errors import VerificationError

        volume, failed = self._torch_volume(spec, log_path, timeout)
        if failed is not None:
            raise VerificationError(f"{wheel.name}: smoke test: {failed.reason}")
        out = log_path.with_name(log_path.stem + ".smoke.log")
        out.write_text(f"== smoke test of {wheel.name} in {self.tags[spec.image]} ({self.machines.get(spec.image)})\n")
        if recipe is None or not recipe.deps:
            return self._smoke(spec, wheel, volume, out, timeout, recipe)
        if machine_of(spec.platform) == host_machine():  # its dependencies are the host executor's to install
            raise VerificationError(
                f"{wheel.name}: the recipe's declared dependencies (`[test] deps = true`) are installed only for another "
                "machine's smoke test here (the host executor installs them for this one)"
            )
        slot = cache.smoke_slot(spec.python_tag, spec.torch_version, machine_of(spec.platform))
        slot.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(slot) + ".lock"):  # held while the layer is used: `cache prune` passes it by
            layer, deps = self._foreign_deps(spec, wheel, Path(volume), slot / "deps-envs", out, timeout)
            return self._smoke(spec, wheel, volume, out, timeout, recipe, layer=layer, deps=deps)

    def _foreign_deps(self, spec, wheel: Path, torch_folder: Path, root: Path, log_path: Path, timeout: float):
        """The layer of WHEEL's declared dependencies for SPEC's machine and Python, fetched by this host's pip
        (builder.building.cache.foreign_deps_layer), and those requirements: judged for the target, torch left out."""
        from builder.building import cache
        from builder.verifying.wheels import declared_requirements

        machine = machine_of(spec.platform)
        environment = target_environment(machine, spec.python)
        deps = tuple(declared_requirements(wheel, environment))
        try:
            python = interpreters.python_prefix(spec.python, log=self.log) / "bin" / "python3"
        except FarmError:  # no host Python of that version: imports compile it, slowly
            python = None
        started = time.monotonic()
        layer = cache.foreign_deps_layer(
            torch_folder / "site", list(deps), root, platforms=manylinux_platforms(wheel_manylinux(wheel, spec)),
            python=spec.python, environment=environment, pip_args=spec_env(spec, max_jobs=1)["FARM_TORCH_PIP_ARGS"].split(),
            compile_with=python, log_path=log_path, timeout=timeout,
        )  # fmt: skip
        self.log(f"{spec.id}: dependency layer {layer.name} for {machine}: {len(deps)} requirement(s) ({time.monotonic() - started:.0f}s)")
        return layer, deps

    def _smoke(self, spec, wheel: Path, volume: str, out: Path, timeout: float, recipe=None, layer=None, deps=()) -> dict:
        import shlex

        from builder.errors import VerificationError
        from builder.verifying.wheels import SMOKE_SCRIPT, recipe_ran, recipe_steps, smoke_evidence

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(wheel, arcname=f"smoke/{wheel.name}")
            data = SMOKE_SCRIPT.encode()
            info = tarfile.TarInfo("smoke/smoke.py")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        vpy = "/smoke/venv/bin/python"
        check = f'"$FARM_PYTHON" -m pip --python {vpy} check'
        purelib = f"$({vpy} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
        if recipe is None:  # the wheel's own torch pin must accept the torch it is tested with
            steps = [check, f"{vpy} /smoke/smoke.py"]
        else:  # installed without its dependencies, as on the host: pip check only when they are there
            first, *commands = [shlex.join(argv) for argv in recipe_steps(vpy, recipe.imports, recipe.commands, recipe.api)]
            # each command's output between markers, for the evidence (the container's output is one stream)
            steps = [first, *(f"echo {_COMMAND_MARK}{i} && {c} 2> /smoke/err && echo {_COMMAND_MARK}err "
                              f"&& cat /smoke/err && echo {_COMMAND_MARK}end" for i, c in enumerate(commands))]  # fmt: skip
            if layer is not None:  # the dependency layer as the host adds its own: its .pth files run
                steps = [f"echo \"import site; site.addsitedir('/deps/site')\" > \"{purelib}/_farm_deps.pth\"", check, *steps]
        script = (
            f'set -e; "$FARM_PYTHON" -m venv --without-pip /smoke/venv; '
            f'echo /torch/site > "{purelib}/_torch.pth"; '
            f'"$FARM_PYTHON" -m pip --python {vpy} install -q --no-deps /smoke/{wheel.name}; '
            "cd / && " + " && ".join(steps)
        )
        env = {k: v for k, v in self._env(spec).items() if k != "PYTHONPATH"}
        volumes = {volume: {"bind": "/torch", "mode": "ro"}}
        if layer is not None:
            volumes[str(layer)] = {"bind": "/deps", "mode": "ro"}
        try:
            code = self._run(spec, ["bash", "-c", script], env, volumes, out, timeout, archive=buf.getvalue())
        except _TimedOut:
            raise VerificationError(f"{wheel.name}: smoke test under emulation timed out after {timeout:.0f}s") from None
        lines = [ln for ln in out.read_text(errors="replace").splitlines() if ln.strip()]
        if code != 0:
            raise VerificationError(f"{wheel.name}: smoke test failed in {self.tags[spec.image]}: {lines[-1] if lines else code} (log: {out})")
        emulated = machine_of(spec.platform) != host_machine()
        if recipe is not None:
            ran = recipe_ran(smoke_evidence("\n".join(lines)), f"torch=={spec.torch_version}", recipe.imports,
                             recipe.commands, recipe.api, _command_outputs(lines, len(recipe.commands)))  # fmt: skip
            ran["imported"]["emulated"] = emulated
            if layer is not None:
                ran["imported"]["deps"] = list(deps)
            return ran
        ran = smoke_evidence("\n".join(lines))
        ran["imported"] = {**ran["imported"], "emulated": emulated}
        return {"line": next((ln for ln in reversed(lines) if ln.startswith("smoke ok")), "smoke ok"), **ran}

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


_COMMAND_MARK = "@@mamba-farm-command-"


def _command_outputs(lines: list[str], count: int) -> list[tuple[str, str]]:
    """Each recipe test command's (stdout, stderr), from the smoke container's lines between its markers."""
    outputs: list[tuple[list[str], list[str]]] = [([], []) for _ in range(count)]
    current, stream = None, 0
    for ln in lines:
        if ln.startswith(_COMMAND_MARK):
            tail = ln[len(_COMMAND_MARK) :].strip()
            if tail == "err":
                stream = 1
            else:
                current, stream = (int(tail) if tail.isdigit() and int(tail) < count else None), 0
        elif current is not None:
            outputs[current][stream].append(ln)
    return [("\n".join(out), "\n".join(err)) for out, err in outputs]
