/* policy.c - placeholder until written */
