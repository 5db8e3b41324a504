//! The page templates' tests: escaping, CSRF fields, and what each page offers.

use super::account::*;
use super::lifecycle::*;
use super::project::*;
use super::providers::*;
use super::sandboxes::*;
use super::sign_in::*;
use crate::view::*;

fn chrome() -> Chrome {
    Chrome {
        email: "ada@example.test".to_owned(),
        csrf: "csrf-value".to_owned(),
        accounts: Vec::new(),
        account: None,
        projects: Vec::new(),
        project: None,
        nav: Nav::Overview,
        flash: Some(Flash::error("<b>bold</b>")),
    }
}

fn project(name: &str) -> ProjectView {
    ProjectView {
        id: "prj_1".to_owned(),
        name: name.to_owned(),
        created: "today".to_owned(),
        deleting: false,
        account: AccountView {
            id: "acc_1".to_owned(),
            name: "Acme".to_owned(),
            personal: false,
            role: "admin".to_owned(),
            version: 1,
            deleting: false,
        },
    }
}

#[test]
fn user_data_is_escaped_and_every_form_carries_the_csrf_field() {
    let evil = "<img src=x onerror=alert(1)>";
    let page = project_settings(&ProjectSettingsPage {
        chrome: chrome(),
        project: project(evil),
    })
    .into_string();
    assert!(!page.contains(evil), "raw markup from user data");
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(
        page.contains("&lt;b&gt;bold&lt;/b&gt;"),
        "flash text is escaped"
    );
    let forms = page.matches("method=\"post\"").count();
    let csrf = page.matches("name=\"csrf\" value=\"csrf-value\"").count();
    // Sign out, sign out everywhere, rename, delete.
    assert_eq!((forms, csrf), (4, 4), "every POST form has the CSRF field");
    assert!(!page.contains("<script>"), "no inline script");
    assert!(
        !page.contains("style=\""),
        "no inline style (the CSP forbids it)"
    );
}

#[test]
fn a_bridge_url_field_says_why_the_browser_refuses_http() {
    let page = providers(&ProvidersPage {
        chrome: chrome(),
        project: project("p"),
        cards: vec![ProviderCard {
            provider: "cloudflare".to_owned(),
            label: "Cloudflare".to_owned(),
            enabled: true,
            connected: false,
            has_credential: false,
            needs_credential: true,
            bridge: true,
            fields: vec![ContextField {
                name: "bridgeUrl",
                label: "Bridge URL",
                hint: "",
                value: String::new(),
            }],
            missing: Vec::new(),
            checks: Vec::new(),
            state: CardState::NotConnected,
            tested: None,
        }],
    })
    .into_string();
    let at = page
        .find("id=\"cloudflare-bridgeUrl\"")
        .unwrap_or_else(|| panic!("{page}"));
    let input = &page[at..at + page[at..].find('>').unwrap()];
    assert!(input.contains("pattern=\"https://.+\""), "{input}");
    assert!(
        input.contains("title=\"The bridge URL must start with https://"),
        "the words the browser shows when it refuses http://: {input}"
    );
}

#[test]
fn the_new_key_appears_only_when_just_created() {
    let keys_page = |new_key: Option<&str>| {
        keys(&KeysPage {
            chrome: chrome(),
            project: project("p"),
            keys: vec![KeyRow {
                key_id: "abc".to_owned(),
                prefix: "crl_abc_…".to_owned(),
                name: "ci <bot>".to_owned(),
                created: "now".to_owned(),
                expires: "never".to_owned(),
                expired: false,
                last_used: "never".to_owned(),
                revoked: None,
            }],
            new_key: new_key.map(str::to_owned),
            latest: "abc".to_owned(),
        })
        .into_string()
    };
    let with = keys_page(Some("crl_abc_SECRETSECRET"));
    assert!(with.contains("crl_abc_SECRETSECRET") && with.contains("id=\"new-key\""));
    let without = keys_page(None);
    assert!(!without.contains("SECRETSECRET") && !without.contains("id=\"new-key\""));
    assert!(without.contains("crl_abc_…"));
    // The name is escaped; the create form has a name and an expiry choice.
    assert!(without.contains("ci &lt;bot&gt;") && !without.contains("ci <bot>"));
    assert!(without.contains("name=\"name\"") && without.contains("name=\"expires\""));
}

fn members_page(my_role: &str) -> String {
    let mut account = project("p").account;
    account.role = my_role.to_owned();
    let member = |id: &str, role: &str, is_me: bool| MemberRow {
        user_id: id.to_owned(),
        email: format!("{id}@example.test"),
        role: role.to_owned(),
        is_me,
        since: "today".to_owned(),
    };
    members(&MembersPage {
        chrome: chrome(),
        account,
        members: vec![
            member("usr_owner", "owner", false),
            member("usr_me", my_role, true),
            member("usr_member", "member", false),
        ],
        invitations: Vec::new(),
    })
    .into_string()
}

/// Issue 26, bug 7: an admin is not offered what only an owner may do to an owner.
#[test]
fn an_admin_is_not_offered_role_changes_or_removal_of_an_owner() {
    let page = members_page("admin");
    assert!(!page.contains("/members/usr_owner/role"), "{page}");
    assert!(!page.contains("/members/usr_owner/remove"), "{page}");
    assert!(
        !page.contains("<option value=\"owner\""),
        "an admin cannot grant ownership"
    );
    // The admin still manages members.
    assert!(page.contains("/members/usr_member/role"));
    assert!(page.contains("/members/usr_member/remove"));
    // An owner is offered both, ownership included.
    let page = members_page("owner");
    assert!(page.contains("/members/usr_owner/role") && page.contains("/members/usr_owner/remove"));
    assert!(page.contains("<option value=\"owner\""));
}

/// Issue 26, bug 7: a project being deleted says so in its header, the sidebar and the
/// account's project list.
#[test]
fn a_project_being_deleted_is_marked_deleting() {
    let mut p = project("doomed");
    p.deleting = true;
    let mut chrome = chrome();
    chrome.account = Some(AccountLink {
        id: "acc_1".to_owned(),
        name: "Acme".to_owned(),
        personal: false,
        role: "admin".to_owned(),
    });
    chrome.projects = vec![ProjectLink {
        id: "prj_1".to_owned(),
        name: "doomed".to_owned(),
        deleting: true,
    }];
    let page = project_settings(&ProjectSettingsPage {
        chrome: chrome.clone(),
        project: p,
    })
    .into_string();
    assert_eq!(page.matches("badge danger deleting").count(), 2, "{page}");
    assert!(page.contains("This project is being deleted"), "{page}");
    let live = project_settings(&ProjectSettingsPage {
        chrome: super::super::view::Chrome {
            projects: Vec::new(),
            ..chrome
        },
        project: project("alive"),
    })
    .into_string();
    assert!(!live.contains("deleting"), "{live}");
}

/// Issue 26, bug 7: the invitation page names the organization, the inviter and the role.
#[test]
fn the_invitation_page_names_the_organization_inviter_and_role() {
    let offer = InvitationOffer {
        organization: "Acme <Robotics>".to_owned(),
        inviter: Some("grace@example.test".to_owned()),
        role: "admin".to_owned(),
    };
    let page = invitation("ada@example.test", "csrf-value", Some(&offer)).into_string();
    assert!(page.contains("grace@example.test"), "{page}");
    assert!(page.contains("Acme &lt;Robotics&gt;"), "escaped: {page}");
    assert!(page.contains("as an <strong>admin</strong>"), "{page}");
    assert!(!page.contains("Someone invited you to join their organization"));
}

/// Issue 26, bug 7: the terms are rendered from Markdown, and raw HTML in them is text.
#[test]
fn legal_terms_are_rendered_from_markdown_safely() {
    let page = legal(&LegalPage {
        email: "ada@example.test".to_owned(),
        csrf: "csrf-value".to_owned(),
        flash: None,
        docs: vec![LegalDoc {
            document: "terms".to_owned(),
            release: 1,
            title: "Terms".to_owned(),
            body: "## Use\n\nBe **kind**.\n\n<script>alert(1)</script>".to_owned(),
            published: "today".to_owned(),
            accepted: false,
        }],
    })
    .into_string();
    assert!(
        page.contains("<h2>Use</h2>") && page.contains("<strong>kind</strong>"),
        "{page}"
    );
    assert!(
        !page.contains("## Use") && !page.contains("**kind**"),
        "not raw Markdown"
    );
    assert!(!page.contains("<script>alert"), "{page}");
}

fn sandbox_page(status: &str, lifecycle: Lifecycle, can_work: bool) -> String {
    sandbox(&SandboxPage {
        chrome: chrome(),
        project: project("p"),
        row: SandboxRow {
            id: "sbx_local_1".to_owned(),
            provider: "local".to_owned(),
            status: status.to_owned(),
            observed: "now".to_owned(),
            created: "today".to_owned(),
            deleted: None,
            lifecycle,
        },
        facts: Vec::new(),
        notice: None,
        failed_create: None,
        can_work,
        snapshot_key: "console-snapshot-K1".to_owned(),
        fork_key: "console-fork-K2".to_owned(),
        snapshots: Ok(Some(vec![SnapshotRow {
            id: "snp_local_1".to_owned(),
            sandbox: "sbx_local_1".to_owned(),
            name: "<before upgrade>".to_owned(),
            status: "ready".to_owned(),
            size: "1.0 MiB".to_owned(),
            failure: None,
            created: "now".to_owned(),
            deleted: None,
        }])),
        commands: Ok(Vec::new()),
        events: Ok(Vec::new()),
        usage: Err("unknown".to_owned()),
        api_base: "http://x".to_owned(),
        live: None,
    })
    .into_string()
}

/// Issue 32: the lifecycle card offers what applies, each form with its CSRF field and
/// the snapshot and fork forms with the key made with the page; a stopped sandbox's run
/// form is replaced by the words and a Resume; members get no forms.
#[test]
fn the_lifecycle_card_offers_what_applies_with_keys_and_a_stopped_sandbox_offers_resume() {
    let all = Lifecycle {
        stop: true,
        resume: false,
        snapshot: true,
        fork: true,
    };
    let running = sandbox_page("running", all, true);
    assert!(running.contains("id=\"lifecycle\""), "{running}");
    assert!(running.contains("id=\"lifecycle-stop\"") && !running.contains("-resume\""));
    assert!(
        running.contains(
            "action=\"/console/accounts/acc_1/projects/prj_1/sandboxes/sbx_local_1/stop\""
        )
    );
    assert!(running.contains("name=\"key\" value=\"console-snapshot-K1\""));
    assert!(running.contains("name=\"key\" value=\"console-fork-K2\""));
    assert!(running.contains("id=\"fork-count\"") && running.contains("max=\"10\""));
    assert!(running.contains("id=\"run-command\""));
    // Every POST form carries the CSRF field.
    let forms = running.matches("method=\"post\"").count();
    let csrf = running
        .matches("name=\"csrf\" value=\"csrf-value\"")
        .count();
    assert_eq!(forms, csrf, "{running}");
    // The sandbox's snapshots, the name escaped.
    assert!(running.contains("data-snapshot=\"snp_local_1\""));
    assert!(running.contains("&lt;before upgrade&gt;"));

    let stopped = Lifecycle {
        stop: false,
        resume: true,
        snapshot: true,
        fork: true,
    };
    let page = sandbox_page("stopped", stopped, true);
    assert!(page.contains("id=\"lifecycle-resume\"") && !page.contains("-stop\""));
    assert!(page.contains("id=\"sandbox-stopped\"") && page.contains("id=\"commands-resume\""));
    assert!(
        !page.contains("id=\"run-command\""),
        "no run form while stopped"
    );

    let member = sandbox_page("running", all, false);
    assert!(!member.contains("id=\"lifecycle\"") && !member.contains("/stop\""));
    assert!(
        member.contains("data-snapshot=\"snp_local_1\""),
        "members read them"
    );
    // A provider that supports nothing: no card at all.
    let none = sandbox_page("running", Lifecycle::default(), true);
    assert!(!none.contains("id=\"lifecycle\""));
}

/// Issue 32: a fork's flash links its copies within the page's project.
#[test]
fn a_flash_links_the_sandboxes_it_names() {
    let mut c = chrome();
    c.account = Some(AccountLink {
        id: "acc_1".to_owned(),
        name: "Acme".to_owned(),
        personal: false,
        role: "admin".to_owned(),
    });
    c.project = Some("prj_1".to_owned());
    c.flash = Some(
        Flash::ok("Forked into 2 copies:").linking(vec!["sbx_a".to_owned(), "sbx_b".to_owned()]),
    );
    let page = project_settings(&ProjectSettingsPage {
        chrome: c,
        project: project("p"),
    })
    .into_string();
    assert!(
        page.contains("href=\"/console/accounts/acc_1/projects/prj_1/sandboxes/sbx_a\""),
        "{page}"
    );
    assert!(page.contains("/sandboxes/sbx_b\""), "{page}");
}

/// Issue 32: the snapshots tab lists tombstones as such and offers admins a confirmed
/// delete of the others only.
#[test]
fn the_snapshots_page_marks_tombstones_and_deletes_only_live_ones() {
    let row = |id: &str, deleted: Option<&str>| SnapshotRow {
        id: id.to_owned(),
        sandbox: "sbx_local_1".to_owned(),
        name: String::new(),
        status: if deleted.is_some() {
            "deleted"
        } else {
            "ready"
        }
        .to_owned(),
        size: "—".to_owned(),
        failure: None,
        created: "now".to_owned(),
        deleted: deleted.map(str::to_owned),
    };
    let render = |role: &str| {
        let mut p = project("p");
        p.account.role = role.to_owned();
        snapshots(&SnapshotsPage {
            chrome: chrome(),
            project: p,
            rows: vec![row("snp_live", None), row("snp_gone", Some("yesterday"))],
            next: Some("c/1".to_owned()),
        })
        .into_string()
    };
    let page = render("admin");
    assert!(
        page.contains("/snapshots/snp_live/delete") && !page.contains("/snapshots/snp_gone/delete"),
        "{page}"
    );
    assert!(page.contains("class=\"is-tombstone\"") && page.contains("deleted yesterday"));
    assert!(
        page.contains("aria-current=\"page\">Snapshots"),
        "the tab is current"
    );
    assert!(page.contains("?cursor=c%2F1"), "{page}");
    let member = render("member");
    assert!(!member.contains("/delete\""), "{member}");
}
