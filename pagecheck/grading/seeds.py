"""The seeds of the two suite passes: one public, one hidden and derived from the grader's secret.

Every check runs twice on fresh inputs. The public pass uses the suite's
default seed, so a student can reproduce any failure it finds on their own
machine. The hidden pass uses a seed derived from the secret and the
submission's name: an implementation tuned to the public inputs fails there,
and neither the secret nor the hidden seed ever reaches a student-visible file.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from pathlib import Path

from pagecheck.input_files import read_input_text
from pagecheck.invariants.profiles import DEFAULT_SEED

PUBLIC_SEED = DEFAULT_SEED
SECRET_FILE = "secret.txt"  # in the output directory, never in feedback/
MIN_SECRET_LENGTH = 8  # shorter secrets can be guessed from a few public runs
SEED_FILE_LIMIT = 64 * 1024  # a secret is a line; a bigger --seed-file is the wrong file


@dataclass(frozen=True)
class SuitePassSeed:
    kind: str  # "public" or "hidden"
    seed: int


def hidden_seed(secret: str, name: str) -> int:
    digest = hashlib.sha256(f"pagecheck-grade\0{secret}\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1  # a non-negative 63-bit int, as pytest options take


def pass_seeds(secret: str, name: str) -> tuple[SuitePassSeed, SuitePassSeed]:
    return SuitePassSeed("public", PUBLIC_SEED), SuitePassSeed("hidden", hidden_seed(secret, name))


def fingerprint(secret: str) -> str:
    """Identifies the secret in results files, so a resumed run notices a changed secret."""
    return hashlib.sha256(f"pagecheck-grade-fingerprint\0{secret}".encode()).hexdigest()[:16]


def read_secret(path: Path, named: str, advice: str = "") -> str:
    """The secret in the file at `path`, stripped; a ValueError starting with `named` (and ending with `advice`)
    where it cannot be read (a folder, a FIFO no one writes to, over SEED_FILE_LIMIT, not UTF-8) or holds none."""
    try:
        secret = read_input_text(path, SEED_FILE_LIMIT).strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{named} cannot be read: {getattr(exc, 'strerror', None) or exc}{advice}") from None
    if not secret:
        raise ValueError(f"{named} holds no secret (it is empty or only spaces){advice}")
    return secret


def resolve_secret(given: str | None, out: Path) -> str:
    """The --seed value; else the secret saved by an earlier run into `out`; else a new one, saved there."""
    saved = out / SECRET_FILE
    if given is not None:
        # Stripped as a secret read from a file is, so the same secret gives the same hidden inputs either way.
        if not given.strip():
            raise ValueError(f"seed={given!r} is empty; give a non-empty secret or leave --seed out")
        return given.strip()
    if saved.exists() or saved.is_symlink():
        return read_secret(saved, f"the secret an earlier run saved, {saved},",
                           "; give --seed or --seed-file, or remove it for a new secret")  # fmt: skip
    secret = secrets.token_hex(16)
    out.mkdir(parents=True, exist_ok=True)
    saved.touch(mode=0o600)
    saved.write_text(secret + "\n")
    return secret
