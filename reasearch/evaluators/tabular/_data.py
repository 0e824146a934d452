"""The data of ``tabular/csv-v2``: a CSV read on the trusted side, a time-ordered split, public files.

Trust boundary: this module runs on the trusted side only. It reads the user's CSV (size-capped,
every row checked) or generates the bundled default series, sorts by time
and cuts three periods: train (features and target), validation (the last part of the train period)
and test. The public folder a training jail reads holds ``train.csv`` (with the target),
``val.csv`` and ``test.csv`` (features only). The validation and test labels live in this process's
memory only (:class:`Split`): they are never written to any file, so no jail can read them whatever
it binds.

The default series is generated instead of shipped (statsmodels holds real series in its wheel, but
that is 12 MB, plus pandas and patsy, for a few kilobytes of data, and a public series can be looked
up or memorized): a daily series with a trend whose level and slope change at regime breaks, weekly
and yearly seasonality, promotions, a price effect, a nonlinear temperature effect, noise whose scale
changes by regime, autocorrelated residuals, and two pure-noise columns. A linear model on the raw
columns leaves most of that structure on the table.

The same on every machine (docs/architecture.md, invariant 6): the structure, every feature and the whole train
period come from the public constant :data:`PUBLIC_SEED`, so ``train.csv``, ``val.csv`` and ``test.csv``
are byte-identical everywhere. The one part a machine makes is the held-out rows' target noise: their
AR(1) innovations are ``N(0, 1)`` draws seeded by ``derive_seed`` of the evaluator secret, scaled by the
last regime's public ``sigma`` (:func:`held_out_noise_scale`). A candidate that knew the generator could
rebuild the held-out signal but not that noise; expected scores are the same on every machine and a
realized score moves only by that noise (docs/training.md states the spread).
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import hashlib
import io
import itertools
import json
import math
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reasearch.errors import ConfigError

__all__ = ["ID_COLUMN", "Split", "Table", "default_table", "load_split", "read_csv_table"]

ID_COLUMN = "row_id"
MAX_FILE_BYTES = 256 << 20
MAX_ROWS = 2_000_000
MIN_ROWS = 60
DEFAULT_ROWS = 1600
PUBLIC_SEED = 1  # the default series' structure, features and train period: the same on every machine
AR_COEF = 0.5  # the target's residual is AR(1): r_t = AR_COEF * r_(t-1) + e_t
_TIME_NAMES = ("time", "date", "timestamp", "datetime", "ds")


@dataclass(frozen=True, slots=True)
class Table:
    """A CSV as text cells: ``header`` and ``rows`` (each as long as the header)."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    sha256: str
    name: str


@dataclass(frozen=True, slots=True)
class Split:
    """A prepared time-ordered split.

    Attributes:
        name: ``default`` or the data path.
        key: hash of the data and the split's parameters (names the public folder).
        public_dir: ``train.csv``, ``val.csv``, ``test.csv`` (bound read-only into training jails).
        time_col, target_col: the columns used.
        val_ids, test_ids: row ids of the validation and test rows, in time order.
        val_labels, test_labels: their targets (trusted side only; never on disk).
        n_train: rows of ``train.csv``.
    """

    name: str
    key: str
    public_dir: Path
    time_col: str
    target_col: str
    val_ids: tuple[int, ...]
    val_labels: np.ndarray
    test_ids: tuple[int, ...]
    test_labels: np.ndarray
    n_train: int


def read_csv_table(path: str) -> Table:
    """The cells of the CSV file ``path`` (UTF-8, a header row, every row as wide as the header).

    Raises:
        ConfigError: missing, too large, not UTF-8, ragged or empty; a ``.parquet`` file.
    """
    p = Path(path)
    if p.suffix.lower() in (".parquet", ".pq"):
        raise ConfigError(f"{p}: Parquet is not read here (pyarrow is not a dependency); write it as CSV "
                          "(pandas: df.to_csv(path, index=False)) and pass that file")
    if not p.is_file():
        raise ConfigError(f"no such data file: {p} (pass -p data=PATH to a CSV with a header row)")
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{p} is {size} bytes; the limit is {MAX_FILE_BYTES}")
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = tuple(h.strip() for h in next(reader))
    except StopIteration:
        raise ConfigError(f"{p} is empty") from None
    if len(set(header)) != len(header) or any(not h for h in header):
        raise ConfigError(f"{p}: the header must name every column once: {list(header)[:20]}")
    rows: list[tuple[str, ...]] = []
    for lineno, row in enumerate(reader, 2):
        if not row:
            continue
        if len(row) != len(header):
            raise ConfigError(f"{p}:{lineno}: {len(row)} fields, the header has {len(header)}")
        rows.append(tuple(row))
        if len(rows) > MAX_ROWS:
            raise ConfigError(f"{p} has more than {MAX_ROWS} rows")
    return Table(header, tuple(rows), hashlib.sha256(raw).hexdigest(), str(p))


def split_sizes(n: int, val_frac: float, test_frac: float) -> tuple[int, int, int]:
    """Rows of the train, validation and test periods of ``n`` time-ordered rows."""
    n_test = max(1, round(n * test_frac))
    n_val = max(1, round((n - n_test) * val_frac))
    return n - n_test - n_val, n_val, n_test


@dataclass(frozen=True, slots=True)
class _Public:
    """The public part of the default series (every machine draws the same from :data:`PUBLIC_SEED`)."""

    dates: list[dt.date]
    columns: dict[str, np.ndarray]  # dow, temperature, promo, price, holiday, noise_a, noise_b
    signal: np.ndarray  # the target without its residual
    sigma: np.ndarray  # the residual's scale per row (one value per regime)
    eps: np.ndarray  # the residual's innovations (only the train period's are used)


@functools.lru_cache(maxsize=4)
def _public(n: int) -> _Public:
    rng = np.random.default_rng(PUBLIC_SEED)
    t = np.arange(n)
    start = dt.date(2019, 1, 1)
    dates = [start + dt.timedelta(days=int(i)) for i in t]
    dow = np.array([d.weekday() for d in dates])
    doy = np.array([d.timetuple().tm_yday for d in dates])
    breaks = np.sort(rng.choice(np.arange(n // 8, (n * 3) // 5), size=4, replace=False))  # all inside train
    level = np.zeros(n)
    slope = rng.normal(0.01, 0.01)
    base = 50.0
    sigma = np.empty(n)
    edges = [0, *breaks.tolist(), n]
    for a, b in itertools.pairwise(edges):
        seg = np.arange(b - a)
        level[a:b] = base + slope * seg
        sigma[a:b] = rng.uniform(0.6, 2.0)
        base = level[b - 1] + rng.normal(0, 6.0)
        slope = rng.normal(0.0, 0.03)
    weekly = rng.normal(0, 3.0, size=7)
    weekly -= weekly.mean()
    phase = rng.uniform(0, 2 * math.pi)
    yearly = 7.0 * np.sin(2 * math.pi * doy / 365.25 + phase) + 2.5 * np.cos(4 * math.pi * doy / 365.25)
    temp = 15 + 10 * np.sin(2 * math.pi * (doy - 110) / 365.25) + rng.normal(0, 3.0, n)
    promo = (rng.random(n) < 0.12).astype(int)
    price = 10 + np.cumsum(rng.normal(0, 0.05, n))
    price = price - 0.8 * promo
    holiday = ((doy == 1) | (doy == 185) | (doy == 359) | (doy == 360)).astype(int)
    eps = rng.normal(0, 1.0, n)
    noise_a, noise_b = rng.normal(0, 1, n), rng.uniform(0, 1, n)
    signal = (level + weekly[dow] + yearly + 6.0 * promo * (1 + (dow >= 5)) - 3.0 * (price - 10)
              + 0.04 * (temp - 18) ** 2 - 9.0 * holiday)
    cols = {"dow": dow, "temperature": temp, "promo": promo, "price": price, "holiday": holiday,
            "noise_a": noise_a, "noise_b": noise_b}
    for arr in (*cols.values(), signal, sigma, eps):
        arr.flags.writeable = False  # cached: shared by every caller
    return _Public(dates, cols, signal, sigma, eps)


def held_out_noise_scale(n: int = DEFAULT_ROWS) -> float:
    """``sigma`` of the last regime: a held-out target is the public signal plus ``sigma * r_t``."""
    return float(_public(n).sigma[-1])


def default_table(noise_seed: int, held_out_from: int, n: int = DEFAULT_ROWS) -> Table:
    """The bundled default: a daily sales-like series with regimes and seasonality (see the module doc).

    Everything but the target noise of rows ``held_out_from`` and later comes from :data:`PUBLIC_SEED`,
    so every machine makes the same table up to that noise; ``noise_seed`` (derived from the evaluator
    secret) draws those rows' innovations ``e_t ~ N(0, 1)`` of the AR(1) residual
    ``r_t = AR_COEF * r_(t-1) + e_t`` (which starts from the public train period's last residual).
    """
    if not 0 < held_out_from <= n:
        raise ValueError(f"held_out_from must be in (0, {n}], not {held_out_from}")
    pub = _public(n)
    eps = pub.eps.copy()
    eps[held_out_from:] = np.random.default_rng(noise_seed).normal(0, 1.0, n - held_out_from)  # the secret part
    resid = np.zeros(n)
    for i in range(1, n):
        resid[i] = AR_COEF * resid[i - 1] + eps[i]
    y = pub.signal + pub.sigma * resid
    c = pub.columns
    header = ("date", "dow", "temperature", "promo", "price", "holiday", "noise_a", "noise_b", "sales")
    rows = tuple((pub.dates[i].isoformat(), str(int(c["dow"][i])), f"{c['temperature'][i]:.2f}",
                  str(int(c["promo"][i])), f"{c['price'][i]:.3f}", str(int(c["holiday"][i])),
                  f"{c['noise_a'][i]:.4f}", f"{c['noise_b'][i]:.4f}", f"{y[i]:.3f}") for i in range(n))
    blob = "\n".join(",".join(r) for r in rows).encode()
    return Table(header, rows, hashlib.sha256(blob).hexdigest(), "default")


def _time_key(values: list[str]) -> list[float] | list[str]:
    """Sort keys of the time column: numbers when every value is one, else the text (ISO dates sort)."""
    try:
        return [float(v) for v in values]
    except ValueError:
        return values


def _number(cell: str, what: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise ConfigError(f"{what}: {cell[:40]!r} is not a number") from None
    if not math.isfinite(value):
        raise ConfigError(f"{what}: {cell[:40]!r} is not a finite number")
    return value


def pick_time_column(header: tuple[str, ...], time_col: str) -> str:
    """``time_col`` when given (checked), else the first column named like a time (time, date, ...)."""
    if time_col:
        if time_col not in header:
            raise ConfigError(f"no time column {time_col!r} in the data (columns: {list(header)[:20]})")
        return time_col
    for h in header:
        if h.lower() in _TIME_NAMES:
            return h
    raise ConfigError(f"no time column found (none of {', '.join(_TIME_NAMES)}); pass -p time=COLUMN "
                      f"(columns: {list(header)[:20]})")


def _cache_root() -> Path:
    from reasearch.evaluators.training import experiments_root

    return experiments_root() / "tabular-data"


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    buf = io.StringIO(newline="")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")
    os.chmod(path, 0o644)


def _publish(key: str, files: dict[str, tuple[list[str], list[list[str]]]], meta: dict[str, str]) -> Path:
    """Writes the public files once per key (made under a temporary name, then renamed into place)."""
    root = _cache_root()
    root.mkdir(mode=0o755, exist_ok=True)
    final = root / key
    if final.is_symlink():  # never bind what a link points to: made again below
        final.unlink()
    if (final / "meta.json").is_file():
        return final
    tmp = root / f".tmp-{secrets.token_hex(6)}"
    tmp.mkdir(mode=0o755)
    os.chmod(tmp, 0o755)
    for name, (header, rows) in files.items():
        _write_csv(tmp / name, header, rows)
    (tmp / "meta.json").write_text(json.dumps({**meta, "files": sorted(files)}))
    os.chmod(tmp / "meta.json", 0o644)
    try:
        os.rename(tmp, final)
    except OSError:  # made meanwhile by another process: use theirs
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return final


def load_split(data: str, target: str, time_col: str, val_frac: float, test_frac: float, seed: int) -> Split:
    """The split of ``data`` (``"default"``: the generated series, held-out noise from ``seed``; else a CSV path).

    Rows are sorted by time (stable); the last ``test_frac`` of them are the test period, the last
    ``val_frac`` of the rest the validation period. Row ids are positions in that order. Prepared once
    per process and public folder (remade when the folder is gone).
    """
    stamp = _stamp(data)  # an edited file is read again
    split = _load_split(data, target, time_col, val_frac, test_frac, seed, str(_cache_root()), stamp)
    if split.public_dir.is_symlink() or not (split.public_dir / "meta.json").is_file():
        _load_split.cache_clear()
        split = _load_split(data, target, time_col, val_frac, test_frac, seed, str(_cache_root()), stamp)
    return split


def _stamp(data: str) -> tuple[int, int]:
    if data == "default":
        return (0, 0)
    try:
        st = os.stat(data)
    except OSError:
        return (-1, -1)
    return (st.st_mtime_ns, st.st_size)


def _public_digest(rows: list[tuple[str, ...]], target_index: int, n_train: int) -> str:
    """A hash of what the public files show (held-out targets left out): the default data's folder is the
    same on every machine, whatever the secret's held-out noise."""
    h = hashlib.sha256()
    for k, r in enumerate(rows):
        cells = r if k < n_train else (*r[:target_index], "", *r[target_index + 1:])
        h.update("\x1f".join(cells).encode() + b"\x1e")
    return h.hexdigest()


@functools.lru_cache(maxsize=8)
def _load_split(data: str, target: str, time_col: str, val_frac: float, test_frac: float, seed: int,
                root: str, stamp: tuple[int, int]) -> Split:
    if data == "default":
        table = default_table(seed, split_sizes(DEFAULT_ROWS, val_frac, test_frac)[0])
    else:
        table = read_csv_table(data)
    header = table.header
    if ID_COLUMN in header:
        raise ConfigError(f"the data has a column named {ID_COLUMN!r}, which the task adds itself; rename it")
    tcol = pick_time_column(header, time_col)
    if target not in header:
        raise ConfigError(f"no target column {target!r} in the data (columns: {list(header)[:20]})")
    if target == tcol:
        raise ConfigError("the target and the time column must differ")
    if len(table.rows) < MIN_ROWS:
        raise ConfigError(f"the data has {len(table.rows)} rows; at least {MIN_ROWS} are needed")
    ti, yi = header.index(tcol), header.index(target)
    keys = _time_key([r[ti] for r in table.rows])
    order = sorted(range(len(table.rows)), key=lambda i: keys[i])
    rows = [table.rows[i] for i in order]
    labels = np.array([_number(r[yi], f"row {order[k] + 2}, column {target!r}") for k, r in enumerate(rows)])
    n = len(rows)
    n_train, n_val, n_test = split_sizes(n, val_frac, test_frac)
    if n_train < 10:
        raise ConfigError(f"{n} rows leave {n_train} for training; lower val_frac/test_frac or give more data")
    feat = [i for i in range(len(header)) if i not in (ti, yi)]
    pub_header = [ID_COLUMN, tcol, *(header[i] for i in feat)]

    def public(a: int, b: int, with_target: bool) -> list[list[str]]:
        return [[str(k), rows[k][ti], *(rows[k][i] for i in feat), *([rows[k][yi]] if with_target else [])]
                for k in range(a, b)]

    key = hashlib.sha256(json.dumps([_public_digest(rows, yi, n_train), target, tcol, val_frac, test_frac])
                         .encode()).hexdigest()[:20]
    public_dir = _publish(key, {
        "train.csv": ([*pub_header, target], public(0, n_train, True)),
        "val.csv": (pub_header, public(n_train, n_train + n_val, False)),
        "test.csv": (pub_header, public(n_train + n_val, n, False)),
    }, {"id": ID_COLUMN, "time": tcol, "target": target})
    return Split(table.name, key, public_dir, tcol, target, tuple(range(n_train, n_train + n_val)),
                 labels[n_train:n_train + n_val], tuple(range(n_train + n_val, n)), labels[n_train + n_val:], n_train)
