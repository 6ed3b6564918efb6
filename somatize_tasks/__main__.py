"""``python -m somatize_tasks``: the ``somatize-tasks`` command line."""

from somatize_tasks.cli import main

if __name__ == "__main__":
    main()
