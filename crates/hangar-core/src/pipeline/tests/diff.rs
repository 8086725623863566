//! The set-pipeline diff, as data and as text.

use super::*;

const OLD: &str = r#"
groups:
- {name: a, jobs: [build]}
- {name: b, jobs: [deploy]}
resources:
- {name: repo, type: git, source: {uri: old}}
- {name: gone, type: git}
jobs:
- {name: build, plan: [{get: repo}, {get: gone}]}
- {name: deploy, plan: [{get: repo, passed: [build]}]}
"#;

const NEW: &str = r#"
groups:
- {name: b, jobs: [deploy]}
- {name: a, jobs: [build]}
resources:
- {name: repo, type: git, source: {uri: new}}
jobs:
- {name: build, plan: [{get: repo}]}
- {name: deploy, plan: [{get: repo, passed: [build]}]}
display: {background_image: bg.png}
"#;

#[test]
fn the_diff_names_what_changes() {
    let (old, new) = (ok(OLD).config, ok(NEW).config);
    let d = diff(&old, &new);
    let summary: Vec<(Section, &str, Change)> = d
        .items
        .iter()
        .map(|i| (i.section, i.name.as_str(), i.change))
        .collect();
    assert_eq!(
        summary,
        [
            (Section::Groups, "a", Change::Moved),
            (Section::Groups, "b", Change::Moved),
            (Section::Resources, "repo", Change::Changed),
            (Section::Resources, "gone", Change::Removed),
            (Section::Jobs, "build", Change::Changed),
            (Section::Display, "", Change::Added),
        ]
    );
    assert!(diff(&old, &old).is_empty());
    assert_eq!(diff(&old, &old).render(), "");
}

#[test]
fn the_diff_renders_as_plain_text() {
    let (old, new) = (ok(OLD).config, ok(NEW).config);
    let mut d = diff(&old, &new);
    d.items.retain(|i| i.section != Section::Groups);
    assert_eq!(
        d.render(),
        r#"resources:
  resource repo has changed:
    {
      "name": "repo",
      "type": "git",
      "source": {
  -     "uri": "old"
  +     "uri": "new"
      }
    }

  resource gone has been removed:
  - {
  -   "name": "gone",
  -   "type": "git",
  -   "source": {}
  - }

jobs:
  job build has changed:
    {
      "name": "build",
      "plan": [
        {
          "get": "repo"
  -     },
  -     {
  -       "get": "gone"
        }
      ]
    }

  display configuration has been added:
  + {
  +   "background_image": "bg.png"
  + }

"#
    );
}
