"""The readers the public values use, below everything else: the one bounded reader of the
service's numbers, times and nesting (`_bounds`) and the lenient readers of every open shape
(`_lenient`). May import: the package's values (`errors`, `apps`, `models`), nothing above.
"""
