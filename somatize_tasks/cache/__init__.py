"""The content-addressed cache every worker shares: Soma's memo of ``fit`` and ``forward``.

``hashing`` makes keys from content, ``identity`` says what a node is,
``records`` and ``backend`` keep entries in the shared store, ``content`` is
what a worker looks up and stores, ``eviction`` keeps it in bounds.
"""
