"""`python -m bertfamily` (also `torchrun -m bertfamily ...`): the `bertfamily` command."""

from bertfamily.cli import main

if __name__ == "__main__":
    main()
