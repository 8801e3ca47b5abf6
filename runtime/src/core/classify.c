/* classify.c - placeholder until written */
