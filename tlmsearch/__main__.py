"""``python -m tlmsearch``: the ``tlmsearch`` command, for an environment without its script."""

from tlmsearch.cli import main

if __name__ == "__main__":
    main()
