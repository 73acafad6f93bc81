"""``python -m handoffmon``."""

from handoffmon.cli import main

main()
