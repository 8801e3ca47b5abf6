/* call.c - placeholder until written */
