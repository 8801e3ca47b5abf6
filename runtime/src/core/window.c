/* window.c - placeholder until written */
