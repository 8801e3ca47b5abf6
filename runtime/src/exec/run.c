/* run.c - placeholder until written */
