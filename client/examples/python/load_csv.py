#!/usr/bin/env python3
"""Loads a CSV file into unloadkv and reads it back (docs/sdk.md, "Python").

    load_csv.py HOST:PORT FILE.csv

Each row is stored under "<file stem>:<first column>", its other columns as a JSON object
named by the header; then every row is read back by a scan and compared."""
import csv
import json
import pathlib
import sys

import unloadkv


def main(server, path):
    stem = pathlib.Path(path).stem
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{path}: no rows")
    key_column = next(iter(rows[0]))
    with unloadkv.Client(server=server) as kv:
        futures = [kv.put_async(f"{stem}:{row[key_column]}".encode(),
                                json.dumps(row, sort_keys=True).encode()) for row in rows]
        for f in futures:
            f.result(timeout=30)
        back = {k.decode(): json.loads(v) for k, v in kv.scan(f"{stem}:".encode(),
                                                                f"{stem};".encode())}
        print(f"loaded {len(rows)} rows of {path} under {stem}:, read back {len(back)}")
        for row in rows:
            if back.get(f"{stem}:{row[key_column]}") != row:
                sys.exit(f"row {row[key_column]} did not read back")
        first = rows[0][key_column]
        print(f"{stem}:{first} ->", kv.get(f"{stem}:{first}".encode()).decode())
        try:
            kv.get(f"{stem}:no such row".encode())
        except unloadkv.NotFound:
            print("an absent row raises unloadkv.NotFound")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: load_csv.py HOST:PORT FILE.csv")
    main(sys.argv[1], sys.argv[2])
