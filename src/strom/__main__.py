"""`python -m strom ...` runs the `strom` command."""

from strom.cli.main import main

if __name__ == "__main__":
    main()
