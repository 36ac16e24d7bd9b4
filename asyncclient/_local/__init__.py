"""This machine: files written whole (`_files`: renames and removals as every platform allows,
write_atomically), files opened without leaking them (`_opening`), the open-files limit
(`_limits`), locks between processes (`_locks`), request bodies read from disk (`_bodies`)
and a repository's reviewed TOML files (`_toml`).

May import: `_core` and the package's values. Never: `_client`, the workflows (`upload`,
`watch`, ...) or anything above them (tests/test_imports.py holds it).
"""
