"""`python -m bertfamily.cli`: the same entry point as `python -m bertfamily`."""

from bertfamily.cli import main

main()
