/* budget.c - placeholder until written */
