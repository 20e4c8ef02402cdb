"""Typed errors with distinct exit codes. The CLI prints ``str(err)`` (and ``err.hint``), never a traceback."""

from __future__ import annotations


class FarmError(Exception):
    """Base: something the user can fix. ``exit_code`` is what the CLI returns."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class MatrixError(FarmError):
    """matrix.toml (or a profile / --only selection) is invalid."""

    exit_code = 2


class UsageError(FarmError):
    """A command-line argument is invalid."""

    exit_code = 2


class EngineUnavailable(FarmError):
    """The container engine (or the host toolchain) needed by an executor is not usable."""

    exit_code = 3


class BuildFailed(FarmError):
    """One or more builds failed; the others finished."""

    exit_code = 7


class InfrastructureError(FarmError):
    """The build could not run (engine hiccup, network, disk): worth a retry, unlike a compile error.

    The executor catches it and fails only the builds it concerns (the run then ends in BuildFailed).
    75 is EX_TEMPFAIL, what builder/building/executors/build.sh exits with for the same cause.
    """

    exit_code = 75


class VerificationError(FarmError):
    """A wheel does not match the spec that built it (tags, ABI, archs, smoke test)."""

    exit_code = 4


class IndexIntegrityError(FarmError):
    """A published file no longer matches its recorded hash, or the index is inconsistent."""

    exit_code = 5


class NameCollision(IndexIntegrityError):
    """One name would stand for two different things: one filename with two sets of bytes, one distribution name
    and version from two sources, or a recipe wheel named as upstream's own release wheels are. The error names
    both; nothing was published."""

    exit_code = 19


# --- Third-party sources and recipes (builder/sourcing/sources.py, builder/planning/recipes.py, builder/sourcing/prepare.py) ---


class SourceIntegrityError(FarmError):
    """A pinned sdist's bytes do not match its sha256 (or it is unsafe to unpack): nothing is built from it."""

    exit_code = 8


class UnsafeArchiveError(SourceIntegrityError):
    """An sdist holds a member that would land outside its unpack folder (absolute or ``..`` paths, links that
    leave the tree, devices, FIFOs): refused before anything is written, on every Python."""

    exit_code = 11


class SourceFetchError(FarmError):
    """A pinned sdist could not be fetched from any index the host's pip settings name."""

    exit_code = 9


class RecipeError(FarmError):
    """A recipe (recipes/*.toml) is invalid, or cannot serve the cell it was asked for."""

    exit_code = 2


class PatchError(FarmError):
    """A recipe patch no longer applies to its file: that one build fails, the others go on."""

    exit_code = 10


class PreflightError(FarmError):
    """A recipe's preflight (builder/sourcing/preflight.py) found a mistake for a cell before anything compiled:
    an environment value, an arch list, the package's name, version or own label, a requirement; or setup.py
    could not prepare its metadata with the cell's environment."""

    exit_code = 18


# --- The release rehearsal (builder/upkeep/rehearse.py) ---


class RehearsalError(FarmError):
    """The rehearsal could not be set up (act, the actions folder, git)."""

    exit_code = 12


class UnprovenWrite(FarmError):
    """``drift --write``: the data it would write does not load or plan with the farm's own loaders, so
    nothing was written (the files are as they were)."""

    exit_code = 16


class InterpreterUnavailable(FarmError):
    """A CPython the plan needs is neither on the host nor one the farm can provide (builder/environments/interpreters.py)."""

    exit_code = 17


# ``python -m builder drift`` exits 13 (builder.upkeep.drift.DRIFT_EXIT; 11 is an unsafe sdist, 12 a rehearsal) when the data is behind the index:
# not an error, so no class; 10 (PatchError) when a recipe's new sdist breaks one of its patches.


# --- Reproducibility (builder/run/verify.py: ``python -m builder reproduce --rebuild``) ---


class NotReproducible(FarmError):
    """A rebuild of the spec from its recorded inputs gave other bytes than the wheel given: the members
    that differ are listed (a compromised runner or cache, or a source of difference not yet fixed)."""

    exit_code = 14


class RebuildFailed(FarmError):
    """The spec could not be rebuilt (unknown id, inputs that no longer match, a failed build, a wheel
    that could not be read): nothing was compared, so nothing is said about the wheel."""

    exit_code = 15


class NoMatchingWheel(FarmError):
    """The index has no wheel for this environment (the nearest ones are listed)."""

    exit_code = 6
