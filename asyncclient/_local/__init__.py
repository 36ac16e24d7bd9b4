"""This machine: files written whole and renamed as every platform allows (`_files`), files
opened without leaking them (`_opening`), the open-files limit (`_limits`), locks between
processes (`_locks`), request bodies read from disk (`_bodies`), reviewed TOML files (`_toml`),
batches read a few tasks at a time (`_batches`).
May import: `_core` and the values; never `_client`, the workflows or above.
"""
