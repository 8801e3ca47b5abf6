/* backoff.c - placeholder until written */
