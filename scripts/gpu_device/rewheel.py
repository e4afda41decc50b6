"""Rebuild a wheel without some files: rewheel.py SRC.whl OUTDIR PATTERN... (fnmatch on archive names)."""

import fnmatch
import os
import sys
import zipfile

src, outdir, patterns = sys.argv[1], sys.argv[2], sys.argv[3:]
dst = os.path.join(outdir, os.path.basename(src))
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
    gone = {name for name in zin.namelist() if any(fnmatch.fnmatch(name, p) for p in patterns)}
    dropped = 0
    for info in zin.infolist():
        name = info.filename
        if name in gone:
            dropped += info.file_size
            continue
        data = zin.read(name)
        if name.endswith(".dist-info/RECORD"):
            kept = [row for row in data.decode().splitlines() if row.split(",")[0] not in gone]
            data = ("\n".join(kept) + "\n").encode()
        zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
print(f"{os.path.basename(src)}: dropped {len(gone)} files, {dropped / 2**20:.1f} MiB")
