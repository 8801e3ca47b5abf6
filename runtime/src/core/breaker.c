/* breaker.c - placeholder until written */
