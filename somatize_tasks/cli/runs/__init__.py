"""The commands that start and follow runs, one module per concern:

- :mod:`~somatize_tasks.cli.runs.submit`: ``submit`` (on the workers), its summary and
  progress bar;
- :mod:`~somatize_tasks.cli.runs.local`: ``run`` (here, in this process; ``submit --local``);
- :mod:`~somatize_tasks.cli.runs.inspect`: ``runs``, ``status``, ``cancel``, ``forget``;
- :mod:`~somatize_tasks.cli.runs.options`: the options and files they share.
"""

from somatize_tasks.cli.runs import inspect, local, submit
from somatize_tasks.cli.runs.inspect import status_table
from somatize_tasks.cli.runs.submit import follow

__all__ = ["follow", "inspect", "local", "status_table", "submit"]
