"""The rules without I/O: the operations, the local checks, the wire, the retry policy (its
waiting loop is the client's), settings from the environment, decoding answers, the one
sanitiser, the shared wording. May import: the values (`errors`, `models`, `apps`, `_values`,
`_version`) and each other; never `_local`, `_client` or above (tests/across/test_imports.py).
"""
