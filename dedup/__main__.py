"""`python -m dedup`: the operator command line (see `dedup.cli`)."""

from dedup.cli import main

if __name__ == "__main__":
    main()
