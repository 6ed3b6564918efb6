"""What happens next: the engine, dispatch to worker queues, transfer chains, revocation."""
