/* The verbs main() dispatches to that live in cli/ itself. */
#ifndef KV_VERBS_H
#define KV_VERBS_H

int info_main(int argc, char **argv);
int demo_main(int argc, char **argv);
int tokenize_main(int argc, char **argv);
/* `kvtrace prompts needle ...`: needle-in-a-haystack prompt sets (verb_prompts.c). */
int prompts_main(int argc, char **argv);
/* `kvtrace policies [NAME...]`: every policy and allocator, its summary and parameters. */
int policies_main(int argc, char **argv);

#endif
