//! A project's own E2B templates: where an E2B-protocol create naming a template is made
//! (provider and image), consulted before the server's `[e2b.templates]`.

use corral_domain::Provider;
use diesel::prelude::*;
use diesel::upsert::excluded;
use diesel_async::RunQueryDsl;

use crate::db::{run, to_micros, write_tx};
use crate::error::{RegistryError, Result, db_error};
use crate::model::ProjectId;
use crate::registry::Registry;
use crate::schema::e2b_templates as t;

/// Longest template name, in characters.
pub const MAX_TEMPLATE_NAME: usize = 128;

/// One of a project's E2B templates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bTemplate {
    /// The name E2B's SDK passes to `Sandbox.create`.
    pub name: String,
    /// Where its sandboxes are made.
    pub provider: Provider,
    /// The image (the provider's default when absent).
    pub image: Option<String>,
}

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = t)]
struct Row {
    project_id: String,
    name: String,
    provider: String,
    image: Option<String>,
    updated_at: i64,
}

fn template(row: Row) -> Result<E2bTemplate> {
    Ok(E2bTemplate {
        provider: row.provider.parse().map_err(|_| RegistryError::Internal {
            message: "a stored E2B template names an unknown provider".into(),
        })?,
        name: row.name,
        image: row.image,
    })
}

impl Registry {
    /// Sets (or replaces) `project`'s template `name`. The name is 1–128 printable
    /// characters without spaces; the image, if any, non-empty.
    pub async fn put_e2b_template(&self, project: ProjectId, template: &E2bTemplate) -> Result<()> {
        let name = template.name.as_str();
        if name.is_empty()
            || name.chars().count() > MAX_TEMPLATE_NAME
            || name.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(RegistryError::InvalidInput {
                message: format!(
                    "a template name is 1–{MAX_TEMPLATE_NAME} printable characters without spaces"
                ),
            });
        }
        if template.image.as_deref().is_some_and(str::is_empty) {
            return Err(RegistryError::InvalidInput {
                message: "an image, when given, must not be empty".into(),
            });
        }
        let row = Row {
            project_id: project.to_string(),
            name: name.to_owned(),
            provider: template.provider.to_string(),
            image: template.image.clone(),
            updated_at: to_micros(self.database().now()),
        };
        write_tx!(self, |c| {
            diesel::insert_into(t::table)
                .values(&row)
                .on_conflict((t::project_id, t::name))
                .do_update()
                .set((
                    t::provider.eq(excluded(t::provider)),
                    t::image.eq(excluded(t::image)),
                    t::updated_at.eq(excluded(t::updated_at)),
                ))
                .execute(c)
                .await
                .map_err(db_error)?;
            Ok::<_, RegistryError>(())
        })
    }

    /// `project`'s template `name`, if it set one.
    pub async fn e2b_template(
        &self,
        project: ProjectId,
        name: &str,
    ) -> Result<Option<E2bTemplate>> {
        let (p, n) = (project.to_string(), name.to_owned());
        let row: Option<Row> = run!(self, |c| {
            t::table
                .filter(t::project_id.eq(&p))
                .filter(t::name.eq(&n))
                .select(Row::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.map(template).transpose()
    }

    /// `project`'s templates, by name.
    pub async fn e2b_templates(&self, project: ProjectId) -> Result<Vec<E2bTemplate>> {
        let p = project.to_string();
        let rows: Vec<Row> = run!(self, |c| {
            t::table
                .filter(t::project_id.eq(&p))
                .order(t::name.asc())
                .select(Row::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.into_iter().map(template).collect()
    }

    /// Removes `project`'s template `name`; whether there was one.
    pub async fn remove_e2b_template(&self, project: ProjectId, name: &str) -> Result<bool> {
        let (p, n) = (project.to_string(), name.to_owned());
        let removed = run!(self, |c| {
            diesel::delete(t::table.filter(t::project_id.eq(&p)).filter(t::name.eq(&n)))
                .execute(c)
                .await
                .map_err(db_error)
        })?;
        Ok(removed > 0)
    }
}
