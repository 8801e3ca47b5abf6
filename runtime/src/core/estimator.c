/* estimator.c - placeholder until written */
