"""analysis/archive.py — the committed results, one file per family.

Every text file of every run directory of a family (results.json, config.json, progress.json, log.jsonl, report.md,
seconds.txt, a cell's result.json, …) is one row of results/<family>/runs.parquet: its path inside the family, its
sha256 and its text (zstd-compressed by parquet). So results/ holds a few dozen files, and the family reads back
as the directory tree it came from, each file checked against the checksum saved with it:

    python tools/results.py --pack results/reference --into-results   # the directories -> runs.parquet
    python tools/results.py --unpack results/reference --out runs/ref  # runs.parquet -> the directories
    import pandas as pd; pd.read_parquet("results/reference/runs.parquet")     # path, sha256, text

The tools that read a family (tools/reference.py --summary, tools/collapse.py --summary, …) call materialized(root):
the family's directory as it is, or its archive unpacked once into a cache folder. Figures and the per-run tables
(results.parquet / .csv) are not kept: they are rebuilt from results.json (tools/figures.py, experiment/tables.py).
"""
import functools
import glob
import hashlib
import os
import shutil
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

from infra import safety

ARCHIVE = "runs.parquet"
TEXT = (".json", ".jsonl", ".md", ".txt", ".sha256")   # what a family keeps of each run directory
SKIP = ("checkpoints", "partial", "responses")     # (never committed: .gitignore)
def cache_dir():
    """Where archives are unpacked to be read: this user's private temporary folder (safety.private_temp)."""
    return safety.private_temp("results")


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def files_of(directory):
    """{path inside directory: text} of every text file of its run directories (its subfolders; the family's
    own files at its top, such as report.md, stay files of their own), checkpoints and saved responses left out."""
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*", "**", "*"), recursive=True)):
        rel = os.path.relpath(path, directory)
        inside = os.path.realpath(path).startswith(os.path.realpath(directory) + os.sep)   # (no link leads out)
        if os.path.isfile(path) and not os.path.islink(path) and inside and rel.endswith(TEXT) \
                and not set(rel.split(os.sep)) & set(SKIP):
            try:
                out[rel] = open(path, encoding="utf-8").read()
            except UnicodeDecodeError as e:
                raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}): a run's files are; "
                                 f"move it out of the family's folder or repair it") from None
    return out


def run_dirs(directory):
    """The run directories lying loose in a family's folder (runs added since it was packed)."""
    return sorted(d for d in glob.glob(os.path.join(directory, "*")) if os.path.isdir(d))


def live_runs(directory):
    """{run directory: the pid writing it} of the family's loose run directories whose lock a live process holds
    (safety.RunLock): no command packs, removes or rewrites them (round six)."""
    return {d: pid for d in run_dirs(directory) for pid in [safety.RunLock(d).holder()] if pid}


def remove_packed(directory, kept):
    """After a pack: from each loose folder of `directory` that is a run (continual.py's config.json, or a cell's
    result.json, at its top), remove only the files `kept` (the archive, read back and checked) holds with the same
    text, then the folders left empty. Checkpoints, figures, anything the archive lacks, and folders that are no
    run stay, and so does every run a live process is writing (live_runs). Returns the paths kept back."""
    left, files, live = [], files_of(directory), live_runs(directory)
    for d in run_dirs(directory):
        name = os.path.basename(d)
        if d in live or os.path.islink(d) or not (os.path.isfile(os.path.join(d, "config.json"))
                                     or os.path.isfile(os.path.join(d, "result.json"))):
            left.append(d)
            continue
        for path, text in files.items():
            if path.startswith(name + os.sep) and kept.get(path) == text and not os.path.islink(os.path.join(directory, path)):
                os.remove(os.path.join(directory, path))
        for root, _, _ in sorted(os.walk(d, topdown=False), reverse=True):
            if not os.listdir(root):
                os.rmdir(root)
        if os.path.exists(d):
            left.append(d)
    return left


def pack(directory, out_path=None):
    """Every text file of the family's run directories into one parquet table (path, sha256, text), written
    atomically: what its archive already holds, with the loose run directories over it (they are newer). A run a
    live process is writing is not packed (live_runs): a later pack takes it, once finished. Returns (its path, the
    number of files)."""
    out_path = out_path or os.path.join(directory, ARCHIVE)
    live = {os.path.basename(d) + os.sep for d in live_runs(directory)}
    loose = {p: t for p, t in files_of(directory).items() if not any(p.startswith(d) for d in live)}
    files = {**(read(out_path) if os.path.isfile(out_path) else {}), **loose}
    table = pa.table({"path": list(files), "sha256": [sha256(t) for t in files.values()], "text": list(files.values())})
    fd, tmp = tempfile.mkstemp(prefix=ARCHIVE + ".", suffix=".tmp", dir=os.path.dirname(out_path) or ".")
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return out_path, len(files)


def read(archive):
    """{path: text} of an archive, each file checked against its saved sha256 (ValueError naming the first that
    is not what was saved, or the archive itself when it cannot be read)."""
    try:
        table = pq.read_table(archive).to_pydict()
    except Exception as e:   # (a truncated or damaged parquet file)
        raise ValueError(f"{archive} cannot be read ({str(e).splitlines()[0][:160]})") from None
    if not all(k in table for k in ("path", "sha256", "text")):
        raise ValueError(f"{archive} is not an archive of run files (it needs the columns path, sha256 and text; "
                         f"it has {', '.join(table) or 'none'})")
    for path, digest, text in zip(table["path"], table["sha256"], table["text"]):
        if not isinstance(path, str) or not isinstance(text, str) or not isinstance(digest, str):
            raise ValueError(f"{archive}: a row without a path, a text or a sha256 ({path!r}): the archive is damaged")
        if sha256(text) != digest:
            raise ValueError(f"{archive}: {path} is not what was saved (its sha256 differs): the archive is damaged")
    return dict(zip(table["path"], table["text"]))


def unpack(archive, into):
    """The archive's files written under `into` (created), each checked first (read); returns `into`. A file that
    is already there is never replaced (ValueError naming it, before anything is written)."""
    files = read(archive)
    folders = {"/".join(p.split("/")[:k]) for p in files for k in range(1, p.count("/") + 1)}   # (each level above)
    both = sorted(folders & set(files))
    if both:   # (a path that is a file and a folder: nothing can write both)
        raise ValueError(f"{archive}: {both[0]} is both a file and a folder in it; the archive is damaged")
    for path in files:
        target = os.path.join(into, path)
        if os.path.relpath(target, into).startswith(".."):   # (a path that leaves the folder: never written)
            raise ValueError(f"{archive}: {path} is not inside the archive's folder")
        if os.path.lexists(target):
            raise ValueError(f"{target} exists already; unpack into a folder of your own that does not hold it")
    for path, text in files.items():
        target = os.path.join(into, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
    return into


def materialized(root):
    """The family at `root` as a directory tree to read: root itself when it has no archive (a folder of your
    own, or a family not yet packed); else its archive unpacked once into a cache folder named by the archive's
    own sha256 (so an edited archive is unpacked anew), with the family's own top files, and any run directory
    lying loose in root (added since the pack) over it in a folder of its own."""
    archive = os.path.join(root, ARCHIVE)
    if not os.path.isfile(archive):
        return root
    cached = unpacked(root, archive)
    loose = run_dirs(root)
    if not loose:
        return cached
    # the merged view is cached by content too (the archive's and every loose text file's), so repeated reads
    # leave one copy, not one per call
    digest = hashlib.sha256(os.path.basename(cached).encode())
    for path, text in sorted(files_of(root).items()):
        digest.update(f"{path}\0{sha256(text)}\0".encode())
    merged = os.path.join(cache_dir(), f"merged-{digest.hexdigest()[:16]}")
    if not os.path.isfile(os.path.join(merged, ".complete")):
        tmp = tempfile.mkdtemp(prefix="merging-", dir=cache_dir())
        shutil.copytree(cached, tmp, dirs_exist_ok=True)
        for d in loose:
            shutil.copytree(d, os.path.join(tmp, os.path.basename(d)), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(*SKIP), symlinks=True)
        try:
            os.replace(tmp, merged)
        except OSError:   # (another process finished first: its copy is the same)
            shutil.rmtree(tmp, ignore_errors=True)
    note_origin(merged, root)
    return merged


def note_origin(view, root):
    """Beside a cached view, the family folder it shows (shown() names a file by it, not by the cache's path)."""
    with open(os.path.join(view, ".origin.tmp"), "w") as f:
        f.write(os.path.abspath(root))
    os.replace(os.path.join(view, ".origin.tmp"), os.path.join(view, ".origin"))


def shown(path):
    """A path as its user knows it: a file inside a cached view of a family is named by the family's folder, a loose
    run's as root/<run>/<file>, an archived one's as 'root/runs.parquet: <run>/<file>'; any other path as it is."""
    path = os.path.abspath(path)
    cache = os.path.abspath(cache_dir())
    if not path.startswith(cache + os.sep):
        return path
    view, rel = path[len(cache) + 1:].split(os.sep, 1) if os.sep in path[len(cache) + 1:] else (path, "")
    origin = os.path.join(cache, view, ".origin")
    if not rel or not os.path.isfile(origin):
        return path
    root = open(origin).read()
    loose = os.path.join(root, rel.split(os.sep)[0])
    return os.path.join(root, rel) if os.path.isdir(loose) else f"{os.path.join(root, ARCHIVE)}: {rel}"


def unpacked(root, archive):
    """The archive unpacked into cache_dir() (once per archive content), with the family's own top files (report.md,
    distances.json, …) copied from root beside its runs on every call (they may be newer than the archive)."""
    digest = hashlib.sha256(open(archive, "rb").read()).hexdigest()[:16]
    into = os.path.join(cache_dir(), f"{os.path.basename(os.path.abspath(root))}-{digest}")
    if not os.path.isfile(os.path.join(into, ".complete")):
        tmp = unpack(archive, tempfile.mkdtemp(prefix="unpacking-", dir=cache_dir()))
        open(os.path.join(tmp, ".complete"), "w").close()
        try:
            os.replace(tmp, into)
        except OSError:   # (another process finished first: its copy is the same)
            shutil.rmtree(tmp, ignore_errors=True)
    for name in os.listdir(root):
        if os.path.isfile(os.path.join(root, name)) and name != ARCHIVE:
            shutil.copyfile(os.path.join(root, name), os.path.join(into, name))
    note_origin(into, root)
    return into


def archived(root, rel):
    """Whether the family at root holds the file `rel` (a run directory's file), loose or in its archive."""
    if os.path.isfile(os.path.join(root, rel)):
        return True
    archive = os.path.join(root, ARCHIVE)
    return os.path.isfile(archive) and rel in paths_of(archive, os.path.getmtime(archive))


@functools.lru_cache(maxsize=16)
def paths_of(archive, mtime):
    """The paths an archive holds (its path column only; cached while the file is unchanged)."""
    return frozenset(pq.read_table(archive, columns=["path"]).column("path").to_pylist())


def resolve(path):
    """A run directory's path as a folder to read: the path itself when it exists, else the same run inside the
    family whose archive holds it (results/reference/continual-s10 -> its unpacked copy)."""
    if os.path.exists(path):
        return path
    root, rel = os.path.dirname(os.path.normpath(path)), os.path.basename(os.path.normpath(path))
    while root and root != os.path.dirname(root) and not os.path.isfile(os.path.join(root, ARCHIVE)):
        root, rel = os.path.dirname(root), os.path.join(os.path.basename(root), rel)   # (up to "" or "/")
    return os.path.join(materialized(root), rel) if root and os.path.isfile(os.path.join(root, ARCHIVE)) else path
