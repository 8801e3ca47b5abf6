/* bulkhead.c - placeholder until written */
