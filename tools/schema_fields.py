"""Record the field set of each JSON format at its current version (``tests/schema/field_sets.json``).

``tests/schema/test_schema.py`` fails when a format's fields (or their types) differ from the set
recorded for its version. The fix is never to edit an old entry: bump the format's version (in the
code that writes it and in ``schema/narrowpipe.schema.json``) and ``SCHEMA_VERSION``, then run
``python tools/schema_fields.py --write``, which adds the new version's set and refuses to change
a recorded one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SNAPSHOT = Path(__file__).resolve().parent.parent / "tests" / "schema" / "field_sets.json"


def current() -> dict[str, list[str]]:
    from narrowpipe.schema import FORMATS, field_paths, format_versions
    versions = format_versions()
    return {f"{fmt}@{versions[fmt]}": field_paths(fmt) for fmt in FORMATS}


def recorded() -> dict[str, list[str]]:
    return json.loads(SNAPSHOT.read_text()) if SNAPSHOT.exists() else {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--write", action="store_true", help="add the sets of versions not recorded yet")
    args = ap.parse_args(argv)
    old, new = recorded(), current()
    changed = sorted(k for k in new if k in old and old[k] != new[k])
    for key in changed:
        gone, added = sorted(set(old[key]) - set(new[key])), sorted(set(new[key]) - set(old[key]))
        print(f"{key} changed without a version bump:\n  - " + "\n  - ".join(gone or ["(nothing)"])
              + "\n  + " + "\n  + ".join(added or ["(nothing)"]))
    missing = sorted(k for k in new if k not in old)
    if args.write and not changed:
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(json.dumps({**old, **new}, indent=1, sort_keys=True) + "\n")
        print(f"recorded {', '.join(missing) or 'nothing new'}")
        return 0
    if missing:
        print(f"not recorded yet: {', '.join(missing)} (run with --write)")
    return 1 if changed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
