# SPDX-License-Identifier: MIT
# manpage.awk - a manual page (roff, man macros) from a program's --help
# text, so the page and --help cannot drift: the help text is the one
# source. cmake/manpage.cmake runs the built program and this script at
# build time. Variables: name (the program), section (1, 8...), summary
# (the NAME line's description), version.
#
# The help text's shape (each program's --help keeps it):
#   usage: PROGRAM ...            the synopsis, up to the first blank line,
#          PROGRAM ...            continuation lines aligned under it
#   Plain lines at column 0       paragraphs of the description
#   Heading:                      a section (DESCRIPTION until the first)
#     TERM   text                 an entry: two spaces, a term, two or more
#            more text            spaces, its text; deeper lines go on
#   a blank line                  ends a paragraph or a list
function esc(s) {
  gsub(/\\/, "\\e", s)
  gsub(/--/, "\\-\\-", s)
  if (s ~ /^[.']/) s = "\\&" s
  return s
}
function term(s) {
  s = esc(s)
  if (s ~ /^-/) gsub(/-/, "\\-", s)
  return s
}
function heading(s) {
  s = toupper(s)
  return s
}
BEGIN {
  printf ".TH %s %s \"\" \"nres %s\" \"nres manual\"\n", toupper(name), section, version
  printf ".SH NAME\n%s \\- %s\n", name, esc(summary)
  state = "synopsis"
}
state == "synopsis" {
  if ($0 ~ /^[ \t]*$/) {
    if (started) { print ".fi"; state = "body"; sect = "" }
    next
  }
  if (!started) { print ".SH SYNOPSIS"; print ".nf"; started = 1 }
  # "usage: " goes; the continuation lines keep their alignment under it.
  line = $0
  if (line ~ /^usage:/) sub(/^usage: */, "", line)
  else if (substr(line, 1, 7) ~ /^ +$/) line = substr(line, 8)
  print esc(line)
  next
}
# A heading: a few words and a colon alone at column 0 ("Exit status:").
/^[A-Za-z][A-Za-z ]*:$/ {
  sub(/:$/, "")
  print ".SH " heading($0)
  sect = $0; para = 0
  next
}
/^[ \t]*$/ { para = 1; next }
{
  if (sect == "") { print ".SH DESCRIPTION"; sect = "DESCRIPTION"; para = 0 }
}
# An entry: two spaces, a term, two or more spaces, its text; or a term
# alone on its line (its text below, deeper).
/^  [^ ]/ {
  line = substr($0, 3)
  if (match(line, /   *[^ ]/)) {
    t = substr(line, 1, RSTART - 1); rest = substr(line, RSTART)
    sub(/^ +/, "", rest)
    print ".TP"; print ".B " term(t); print esc(rest)
  } else {
    print ".TP"; print ".B " term(line)
  }
  para = 0
  next
}
# A deeper line: the text of the entry above goes on.
/^   / {
  line = $0; sub(/^ +/, "", line)
  print esc(line)
  next
}
{
  if (para) { print ".PP"; para = 0 }
  print esc($0)
}
END {
  if (state == "synopsis" && started) print ".fi"
}
