"""The ground layer: values and rules, no I/O of their own.

The API's operations (`_operations`), every local check of what a caller passes (`_checks`),
the wire's rules without a socket (`_wire`: headers, URLs, Retry-After, id batches), the retry
policy (`_retry`), settings from the environment (`_environment`), the lenient readers of
every open shape the service sends (`_lenient`), the one cattrs converter (`_converter`), the
decoding of answers into models and errors (`_responses`), the one sanitiser of the service's
text (`_untrusted`), what the CLI and the tool server both say (`_wording`), file names every
platform stores (`_names`), "did you mean" (`_suggest`) and the keys of the configuration
files (`_config_keys`).

May import: the package's values (`errors`, `models`, `_version`), `apps`, and each other.
Never: `_local`, `_client` or any layer above (tests/test_imports.py holds it).
"""
