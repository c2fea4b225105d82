/* The verbs main() dispatches to that live in cli/ itself. */
#ifndef KV_VERBS_H
#define KV_VERBS_H

int verb_info(int argc, char **argv);
int demo_main(int argc, char **argv);
int verb_tokenize(int argc, char **argv);
/* `kvtrace prompts needle ...`: needle-in-a-haystack prompt sets (verb_prompts.c). */
int verb_prompts(int argc, char **argv);
/* `kvtrace policies [NAME...]`: every policy and allocator, its summary and parameters. */
int policies_main(int argc, char **argv);
/* `kvtrace features TRACES -o FILE.h5`: per-candidate features and targets (verb_features.c, search/). */
int features_main(int argc, char **argv);
/* `kvtrace fit FEATURES... -o DIR`: a score expression fitted on feature files (search/). */
int verb_fit(int argc, char **argv);

#endif
