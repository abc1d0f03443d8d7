"""``python -m tuner`` runs the command line."""

from tuner.cli.main import main

main()
