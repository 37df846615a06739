/* ctl.h — verbs of jailboxctl implemented outside its main file. Each takes the arguments
 * after the verb and returns the process exit code: 0 done, 1 refused/failed check, 2 usage
 * error, 3 failure (server or database unreachable). */
#ifndef JB_CTL_H
#define JB_CTL_H

/* token create --role service [--label L] [--database-url URL | --state-dir DIR] */
int jb_ctl_token_create(int argc, char **argv);

#endif
