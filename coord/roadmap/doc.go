// Package roadmap reads and writes a project's roadmap: modules,
// initiatives and their tasks as markdown files with YAML frontmatter. It
// normalises statuses, orders initiatives (next-pointer chains) and walls
// (wall_order), reconciles an initiative's status with its tasks', and
// moves initiatives between walls. Every write changes only the
// frontmatter keys it means to; the rest of each file is kept byte for
// byte.
//
// Layout, under the project folder:
//
//	roadmap/modules/<module>.md                 a module's page
//	roadmap/initiatives/<initiative>.md         an initiative
//	roadmap/initiatives/<initiative>/<task>.md  its tasks
//
// Ids are the lowercase file stems.
package roadmap
